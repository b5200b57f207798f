"""An ack that says part of a batch was refused (a GPU the node's inventory lacks) reaches
the node's operator as a warning — once per refusal every ten minutes, not every second."""

from __future__ import annotations

import logging

import pytest

from agents.uplink import REFUSAL_LOG_EVERY_S, PartRefusals

REFUSED = {"code": 400, "field": "gpu[8].gpu", "reason": "GPU 8 is not in the inventory"}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "agents.uplink" and r.levelno == logging.WARNING]


def test_a_refused_part_is_logged_with_its_field_and_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="agents.uplink")
    PartRefusals().note("node:gpu-a01-01", REFUSED)
    (record,) = warnings(caplog)
    assert record.getMessage() == "server stored the batch but refused part of it"
    assert record.__dict__["field"] == "gpu[8].gpu"
    assert "not in the inventory" in record.__dict__["reason"]


def test_the_same_refusal_every_second_is_logged_once_per_ten_minutes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="agents.uplink")
    clock = FakeClock()
    refusals = PartRefusals(clock)
    for _ in range(int(REFUSAL_LOG_EVERY_S) - 1):
        refusals.note("node:gpu-a01-01", REFUSED)
        clock.now += 1
    assert len(warnings(caplog)) == 1
    clock.now += 1
    refusals.note("node:gpu-a01-01", REFUSED)
    assert len(warnings(caplog)) == 2


def test_a_different_refusal_is_logged_at_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="agents.uplink")
    refusals = PartRefusals(FakeClock())
    refusals.note("node:gpu-a01-01", REFUSED)
    refusals.note("node:gpu-a01-01", {**REFUSED, "field": "events[0].gpu"})
    assert len(warnings(caplog)) == 2
