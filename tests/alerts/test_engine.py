"""The alert engine: rules against latest state, instances pending → firing → resolved,
hysteresis, no data, history — latest state written through `merge_latest`."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

import pytest

from fleet.alerts.engine import evaluate
from fleet.alerts.models import AlertInstance, AlertInstanceEvent, AlertRule
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import GPU, Node
from tests.support import alert_engine
from tests.support.alert_engine import T0
from tests.support.latest import store_latest as store

pytestmark = pytest.mark.django_db

NODE = 7


only_our_rules = alert_engine.our_rules_only  # autouse


def inlet_rule(for_s: float = 0, clear: float | None = None) -> AlertRule:
    return AlertRule.objects.create(
        key="inlet-hot",
        name="Inlet hot",
        scope="node",
        signal="temp_inlet_c",
        comparison="gt",
        threshold=30.0,
        clear_threshold=clear,
        for_duration=dt.timedelta(seconds=for_s),
        severity="warning",
        labels={"team": "facilities"},
        summary="{node} inlet {value:.1f} °C",
    )


def inlet_at(offset: float, temp: float) -> None:
    """A fresh inlet sample at T0 + offset, then an evaluation at that time."""
    store("node", (NODE,), T0 + offset, temp_inlet_c=temp)
    evaluate(T0 + offset)


def states(rule: AlertRule) -> list[tuple[str, str]]:
    return list(
        AlertInstanceEvent.objects.filter(instance__rule=rule).values_list("from_state", "to_state")
    )


def test_a_breach_shorter_than_for_duration_never_fires() -> None:
    rule = inlet_rule(for_s=60)
    inlet_at(0, 35.0)
    inlet_at(30, 35.0)
    assert AlertInstance.objects.get().state == "pending"
    inlet_at(40, 25.0)
    inst = AlertInstance.objects.get()
    assert inst.state == "resolved" and inst.fired_at is None  # dropped, never fired
    assert states(rule) == [("", "pending"), ("pending", "resolved")]


def test_a_breach_held_for_for_duration_fires() -> None:
    inlet_rule(for_s=60)
    inlet_at(0, 35.0)
    inlet_at(50, 36.0)
    assert AlertInstance.objects.get().state == "pending"
    inlet_at(60, 36.0)
    inst = AlertInstance.objects.get()
    assert inst.state == "firing" and inst.entity == str(NODE)
    assert inst.labels["team"] == "facilities" and inst.labels["rule"] == "inlet-hot"


def test_a_tick_landing_a_little_early_still_completes_the_for_duration(settings: Any) -> None:
    settings.ALERT_EVAL_S = 10
    inlet_rule(for_s=30)
    for at in (0, 10.3, 19.8, 29.6):  # a worker picking ticks up a few tenths late or early
        inlet_at(at, 36.0)
    assert AlertInstance.objects.get().state == "firing"  # not one interval later


def test_a_firing_alert_holds_between_clear_and_threshold_and_resolves_past_clear() -> None:
    inlet_rule(clear=27.0)
    inlet_at(0, 35.0)
    assert AlertInstance.objects.get().state == "firing"  # for_duration 0: at once
    inlet_at(10, 28.0)  # under the threshold, above the clear threshold
    assert AlertInstance.objects.get().state == "firing"
    inlet_at(20, 26.5)
    inst = AlertInstance.objects.get()
    assert inst.state == "resolved" and inst.value == 26.5


def test_a_stale_value_keeps_a_firing_instance_firing_with_no_data() -> None:
    rule = inlet_rule()
    inlet_at(0, 35.0)
    evaluate(T0 + 120)  # no sample since: the value is stale
    inst = AlertInstance.objects.get()
    assert inst.state == "firing" and inst.no_data is True
    assert inst.labels["team"] == "facilities"  # the original instance, its own routing
    inlet_at(130, 34.0)
    inst = AlertInstance.objects.get()
    assert inst.state == "firing" and inst.no_data is False
    assert AlertInstance.objects.filter(rule=rule).count() == 1


def test_an_entity_without_the_metric_makes_no_instance() -> None:
    inlet_rule()
    store("node", (NODE,), T0, cpu_pct=99.0)  # this node reports no inlet sensor
    store("node", (NODE + 1,), T0 - 300, temp_inlet_c=40.0)  # hot, but stale
    evaluate(T0)
    assert not AlertInstance.objects.exists()


def test_each_transition_writes_history_with_time_and_value() -> None:
    rule = inlet_rule(for_s=10, clear=27.0)
    inlet_at(0, 31.0)
    inlet_at(10, 32.0)
    evaluate(T0 + 100)  # stale: no data
    inlet_at(110, 20.0)
    events = list(AlertInstanceEvent.objects.filter(instance__rule=rule))
    assert [(e.from_state, e.to_state, e.value, e.no_data) for e in events] == [
        ("", "pending", 31.0, False),
        ("pending", "firing", 32.0, False),
        ("firing", "firing", None, True),
        ("firing", "resolved", 20.0, False),
    ]
    assert [e.at.timestamp() for e in events] == pytest.approx([T0, T0 + 10, T0 + 100, T0 + 110])


def test_an_evaluation_of_a_tick_already_evaluated_changes_nothing() -> None:
    rule = inlet_rule()
    inlet_at(0, 35.0)
    store("node", (NODE,), T0 + 5, temp_inlet_c=20.0)
    assert evaluate(T0) == {"skipped": 1}  # redelivered
    assert evaluate(T0 - 10) == {"skipped": 1}  # late
    assert AlertInstance.objects.get().state == "firing"
    assert states(rule) == [("", "firing")]


def test_a_disabled_rule_resolves_its_instances() -> None:
    rule = inlet_rule()
    inlet_at(0, 35.0)
    AlertRule.objects.filter(pk=rule.pk).update(enabled=False)
    evaluate(T0 + 10)
    assert AlertInstance.objects.get().state == "resolved"


def test_a_signal_the_engine_cannot_compute_is_skipped() -> None:
    AlertRule.objects.create(  # not in the catalogue (validation would refuse it)
        key="xid",
        name="XID",
        scope="gpu",
        signal="no_such_signal",
        comparison="ge",
        threshold=1,
        severity="critical",
        summary="{node} xid",
    )
    assert evaluate(T0)["rules"] == 0


def test_gpu_headroom_rule_fires_against_the_gpus_own_slowdown_limit() -> None:
    seed_demo_site("demo", (replace(DEMO_RACKS[0], nodes=1),), gpus_per_node=2)
    GPU.objects.update(slowdown_c=87.0)
    node = Node.objects.get()
    AlertRule.objects.create(
        key="headroom",
        name="Headroom",
        scope="gpu",
        signal="headroom_slowdown_c",
        comparison="le",
        threshold=3.0,
        clear_threshold=5.0,
        severity="critical",
        summary="{node} GPU {gpu}",
    )
    store("gpu", (node.id, 0), T0, temp_gpu_c=85.0)  # 2 °C from slowdown
    store("gpu", (node.id, 1), T0, temp_gpu_c=70.0)
    evaluate(T0)
    inst = AlertInstance.objects.get()
    assert inst.entity == f"{node.id}:0" and inst.state == "firing" and inst.value == 2.0
