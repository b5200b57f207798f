"""An alert rule is refused with an error on the field at fault."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from fleet.alerts.models import AlertRule

# full_clean checks the key is unique, which reads the table.
pytestmark = pytest.mark.django_db


def rule(**overrides: Any) -> AlertRule:
    fields: dict[str, Any] = {
        "key": "test-rule",
        "name": "Test rule",
        "scope": "gpu",
        "signal": "headroom_slowdown_c",
        "comparison": "lt",
        "threshold": 10.0,
        "clear_threshold": 12.0,
        "for_duration": dt.timedelta(minutes=2),
        "severity": "warning",
        "summary": "{node} GPU {gpu}: {value:.0f} °C",
    }
    return AlertRule(**{**fields, **overrides})


def errors_of(r: AlertRule) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as exc:
        r.full_clean()
    return exc.value.message_dict


def test_a_well_formed_rule_validates() -> None:
    rule().full_clean()


def test_it_refuses_an_unknown_signal() -> None:
    assert "unknown signal 'gpu_vibes'" in errors_of(rule(signal="gpu_vibes"))["signal"][0]


def test_it_refuses_a_signal_that_does_not_exist_at_that_scope() -> None:
    msg = errors_of(rule(scope="rack"))["signal"][0]
    assert "does not exist at rack scope (only at gpu)" in msg


def test_it_refuses_a_clear_threshold_above_the_threshold_of_an_above_rule() -> None:
    r = rule(signal="temp_gpu_c", comparison="gt", threshold=85, clear_threshold=90)
    assert "must be ≤ the threshold" in errors_of(r)["clear_threshold"][0]


def test_it_refuses_a_clear_threshold_below_the_threshold_of_a_below_rule() -> None:
    assert "must be ≥ the threshold" in errors_of(rule(clear_threshold=8))["clear_threshold"][0]


def test_a_clear_threshold_equal_to_the_threshold_is_no_hysteresis_and_valid() -> None:
    rule(clear_threshold=10.0).clean()


def test_it_refuses_a_negative_for_duration() -> None:
    r = rule(for_duration=dt.timedelta(seconds=-1))
    assert errors_of(r)["for_duration"] == ["the for-duration cannot be negative"]


def test_it_refuses_a_summary_with_an_unknown_placeholder() -> None:
    msg = errors_of(rule(summary="{node} is {mood}"))["summary"][0]
    assert "unknown placeholder {mood}" in msg


def test_it_refuses_a_placeholder_of_another_scope() -> None:
    # A site-wide rule has no node to name.
    r = rule(scope="site", signal="pue", comparison="gt", threshold=1.5, clear_threshold=1.4)
    assert "unknown placeholder {node}" in errors_of(r)["summary"][0]


def test_it_refuses_a_summary_that_does_not_render() -> None:
    assert "does not render" in errors_of(rule(summary="{value:.1q}"))["summary"][0]


def test_it_refuses_labels_that_are_not_a_flat_string_map() -> None:
    assert "string value" in errors_of(rule(labels={"team": 3}))["labels"][0]
    assert "set by the engine" in errors_of(rule(labels={"severity": "x"}))["labels"][0]
    assert "lower-case" in errors_of(rule(labels={"Team": "x"}))["labels"][0]


def test_it_refuses_a_parameter_the_signal_does_not_take() -> None:
    msg = errors_of(rule(params={"window_s": 60}))["params"][0]
    assert "takes no parameter 'window_s'" in msg


def test_it_refuses_a_parameter_of_the_wrong_type() -> None:
    r = rule(signal="xid_events", comparison="ge", threshold=1, clear_threshold=None)
    assert "list of integers" in errors_of(r_with(r, codes=["79"]))["params"][0]


def test_it_refuses_a_metric_the_scope_does_not_have() -> None:
    r = rule(signal="metric_lag_s", comparison="ge", threshold=60, clear_threshold=30)
    msg = errors_of(r_with(r, metrics=["flow_lpm"]))["params"][0]
    assert "unknown metric(s) at this scope: ['flow_lpm']" in msg


def test_it_reports_every_faulty_field_at_once() -> None:
    errors = errors_of(
        rule(clear_threshold=5, for_duration=dt.timedelta(seconds=-5), summary="{x}")
    )
    assert {"clear_threshold", "for_duration", "summary"} <= errors.keys()


def test_hysteresis_keeps_an_instance_firing_until_the_clear_threshold_is_crossed() -> None:
    r = rule(signal="temp_gpu_c", comparison="gt", threshold=85, clear_threshold=80)
    assert r.breached(86) and not r.breached(85)
    assert not r.cleared(82)  # under the threshold, not yet past the clear threshold
    assert r.cleared(80)


def test_a_parameter_left_out_takes_the_signals_default() -> None:
    r = rule(signal="xid_events", params={})
    assert 79 in r.param("codes")
    assert r.param("window_s") == 600.0


def r_with(r: AlertRule, **params: Any) -> AlertRule:
    r.params = params
    return r
