"""The server accepts timestamps from MAX_PAST_S ago to MAX_FUTURE_S ahead, and says so."""

from __future__ import annotations

from typing import Any

import pytest

from agents.protocol import MAX_FUTURE_S, MAX_PAST_S
from agents.protocol.validate import ProtocolError, validate_batch

NOW = 1_795_996_288.0
DAY = 86_400.0

# A gpu sample of this shape takes the validator's fast path; a rack sample (string keys)
# always takes the slow one. Both must hold the same window.
SHAPES = {
    "fast path": ("gpu", lambda ts: {"ts": ts, "gpu": 0, "power_w": 80.0}),
    "slow path": ("rack", lambda ts: {"ts": ts, "rack": "A01", "power_w": 9000.0}),
}


def _batch(kind: str, sample: dict[str, Any]) -> dict[str, Any]:
    return {"protocol": 1, "source": "node:n", "seq": 1, kind: [sample]}


def _refusal(batch: dict[str, Any]) -> ProtocolError:
    with pytest.raises(ProtocolError) as refused:
        validate_batch(batch, NOW)
    assert refused.value.code == 400
    return refused.value


def test_the_bounds_are_a_day_back_and_five_minutes_ahead() -> None:
    assert MAX_PAST_S == 24 * 3600
    assert MAX_FUTURE_S == 300


@pytest.mark.parametrize("shape", SHAPES)
def test_a_sample_two_days_old_is_refused_naming_the_bound(shape: str) -> None:
    kind, make = SHAPES[shape]
    refused = _refusal(_batch(kind, make(NOW - 2 * DAY)))
    assert refused.field == f"{kind}[0].ts"
    assert refused.reason == (
        "sample is 2 days old; the server accepts samples up to 24 h old (check the agent's clock)"
    )


@pytest.mark.parametrize("shape", SHAPES)
def test_a_sample_just_over_a_day_old_is_refused_with_its_age(shape: str) -> None:
    kind, make = SHAPES[shape]
    refused = _refusal(_batch(kind, make(NOW - MAX_PAST_S - 1800)))
    assert refused.reason.startswith("sample is 24.5 h old; the server accepts samples up to 24 h")


@pytest.mark.parametrize("shape", SHAPES)
def test_a_sample_just_inside_either_bound_is_accepted(shape: str) -> None:
    kind, make = SHAPES[shape]
    for ts in (NOW - MAX_PAST_S + 1, NOW - MAX_PAST_S, NOW + MAX_FUTURE_S - 1, NOW + MAX_FUTURE_S):
        batch = validate_batch(_batch(kind, make(ts)), NOW)
        assert batch.samples[kind][0]["ts"] == ts  # type: ignore[index]


@pytest.mark.parametrize("shape", SHAPES)
def test_a_sample_from_the_future_is_refused_naming_the_bound(shape: str) -> None:
    kind, make = SHAPES[shape]
    refused = _refusal(_batch(kind, make(NOW + 720)))
    assert refused.field == f"{kind}[0].ts"
    assert refused.reason == (
        "sample is 12 min in the future by the server's clock; the server accepts samples up to "
        "300 s ahead (check the agent's clock)"
    )
    just_over = _refusal(_batch(kind, make(NOW + MAX_FUTURE_S + 1)))
    assert just_over.reason.startswith("sample is 301 s in the future")


def test_one_old_sample_among_good_ones_refuses_the_batch_naming_it() -> None:
    samples = [{"ts": NOW - i, "gpu": i, "power_w": 80.0} for i in range(4)]
    samples[2]["ts"] = NOW - 3 * DAY
    batch = {"protocol": 1, "source": "node:n", "seq": 1, "gpu": samples}
    assert _refusal(batch).field == "gpu[2].ts"


def test_events_are_held_to_the_same_window() -> None:
    def with_event(ts: float) -> dict[str, Any]:
        event = {"ts": ts, "kind": "note", "detail": "x"}
        return {"protocol": 1, "source": "node:n", "seq": 1, "events": [event]}

    old = _refusal(with_event(NOW - 2 * DAY))
    assert old.field == "events[0].ts"
    assert old.reason == (
        "event is 2 days old; the server accepts events up to 24 h old (check the agent's clock)"
    )
    ahead = _refusal(with_event(NOW + 3600))
    assert ahead.field == "events[0].ts"
    assert "300 s ahead" in ahead.reason
    assert validate_batch(with_event(NOW - MAX_PAST_S + 1), NOW).events
    assert validate_batch(with_event(NOW + MAX_FUTURE_S), NOW).events


def test_a_timestamp_that_is_no_unix_time_at_all_says_so_first() -> None:
    refused = _refusal(_batch("gpu", {"ts": 12.0, "gpu": 0}))
    assert "not a plausible Unix time" in refused.reason
