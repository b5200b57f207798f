"""The alert pipeline watches itself: evaluation stopping or falling behind is announced
once, delivered like any alert, and so is its recovery; a restart after a long stop is not
mistaken for a stall."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.alerts import watchdog
from fleet.alerts.engine import evaluate
from fleet.alerts.models import AlertEvaluation, AlertRule
from tests.support.alert_engine import T0, sent
from tests.support.slack_receiver import SlackReceiver

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def only_our_rules(settings: Any) -> None:
    AlertRule.objects.update(enabled=False)
    settings.ALERT_EVAL_S = 10


def watch_while_evaluating(until: float, every: float = 10) -> None:
    at = 0.0
    while at <= until:
        evaluate(T0 + at)
        if at % 30 == 0:
            watchdog.check(T0 + at)
        at += every


def test_a_running_evaluation_raises_nothing(slack: SlackReceiver) -> None:
    watch_while_evaluating(120)
    assert sent(slack) == []


def test_evaluation_that_stops_is_announced_once_then_its_recovery(slack: SlackReceiver) -> None:
    watch_while_evaluating(60)  # last pass at T0 + 60
    assert watchdog.check(T0 + 90) == ""  # 30 s: within three intervals
    problem = watchdog.check(T0 + 120)
    assert problem == "Alert evaluation has stopped: last pass 1 min ago"
    assert watchdog.check(T0 + 150).startswith("Alert evaluation has stopped")
    (message,) = sent(slack)  # said once, not every check
    assert message.body["text"].startswith("CRITICAL: Alert evaluation has stopped")
    evaluate(T0 + 160)
    assert watchdog.check(T0 + 180) == ""
    _, recovered = sent(slack)
    assert recovered.body["text"].startswith("Resolved: Alert evaluation has stopped")
    assert "running again" in recovered.body["text"]


def test_evaluation_that_never_ran_is_announced(slack: SlackReceiver) -> None:
    for at in (0, 25):  # under three intervals (30 s) without a pass: not yet
        watchdog.check(T0 + at)
    assert sent(slack) == []
    assert watchdog.check(T0 + 60) == "Alert evaluation has stopped: no pass for 1 min"
    assert len(sent(slack)) == 1


def test_a_fleet_restarted_after_a_day_off_is_not_called_stalled(slack: SlackReceiver) -> None:
    watch_while_evaluating(60)
    day = 86_400
    assert watchdog.check(T0 + day) == ""  # the watchdog was down too: a new watch starts
    evaluate(T0 + day + 5)
    watch_while_evaluating(0)
    assert watchdog.check(T0 + day + 30) == ""
    assert sent(slack) == []


def test_evaluation_slower_than_its_interval_is_announced_as_falling_behind(
    slack: SlackReceiver,
) -> None:
    watch_while_evaluating(30)
    AlertEvaluation.objects.filter(pk=1).update(last_duration_s=14.2)
    assert watchdog.check(T0 + 40) == (
        "Alert evaluation is falling behind: one pass takes 14.2 s, longer than the 10 s interval"
    )
    (message,) = sent(slack)
    assert message.body["text"].startswith("CRITICAL: Alert evaluation is falling behind")
