"""Grouping, cause before symptoms, silences, maintenance, acknowledge and repeats: what
reaches Slack when many alerts fire together (docs/rules.md, "Grouping" and "Muting").

The engine runs in-process at explicit times against latest state written through
`merge_latest`; deliveries are tried in-process against a local receiver that answers
like Slack (as in tests/alerts/test_notify.py)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from fleet.alerts.engine import evaluate
from fleet.alerts.models import AlertInstance, AlertRule, MaintenanceWindow, Silence
from fleet.models import CoolingLoop, Node, Rack
from tests.support import alert_engine
from tests.support.alert_engine import (
    T0,
    flow_rule,
    gpus_at,
    gpus_of,
    pump_rule,
    pumps_at,
    sent,
    slowdown_rule,
    text_of,
    texts,
)
from tests.support.latest import store_latest as store
from tests.support.slack_receiver import SlackReceiver

pytestmark = pytest.mark.django_db

only_our_rules = alert_engine.grouping_rules_only  # autouse
site = alert_engine.grouping_site


def test_72_gpu_alerts_of_one_rack_starting_together_are_one_message(
    slack: SlackReceiver, site: None
) -> None:
    slowdown_rule()
    hot = gpus_of("A04")
    assert len(hot) == 72
    gpus_at(0, hot)
    assert evaluate(T0)["notified"] == 1
    (message,) = sent(slack)
    assert message.body["text"].startswith("CRITICAL: HW thermal slowdown: 72 GPUs in rack A04")
    body = text_of(message)
    assert "and 52 more" in body  # 20 listed, then a count
    assert len(message.body["blocks"]) <= 50
    gpus_at(10, [])
    evaluate(T0 + 10)
    resolved = sent(slack)[1]
    assert resolved.body["text"].startswith("Resolved: HW thermal slowdown: 72 GPUs in rack A04")


def test_a_cooling_loop_failure_is_one_message_naming_its_racks_and_gpus_as_symptoms(
    slack: SlackReceiver, site: None
) -> None:
    pump_rule()
    flow_rule()
    slowdown_rule()
    pumps_at(0, 0)
    gpus_at(0, [])
    evaluate(T0)  # the loop fails: one message with both its failures and what it cools
    (first,) = sent(slack)
    assert first.body["text"].startswith(
        "CRITICAL: CDU-1: flow 0 L/min, no pump running; it cools A01–A02 (16 GPUs) (site Demo"
    )

    hot = gpus_of("A01", "A02")
    for at in (20, 40):  # the GPUs it cools slow down: grouped under the loop, no message yet
        pumps_at(at, 0)
        gpus_at(at, hot)
        evaluate(T0 + at)
    assert len(sent(slack)) == 1
    groups = AlertInstance.objects.filter(scope="gpu").values_list("group__key", flat=True)
    assert all(key.startswith("loop:") for key in groups)

    pumps_at(60, 0)
    gpus_at(60, hot)
    evaluate(T0 + 60)  # a group interval after the first message: one update
    update = sent(slack)[1]
    story = "CDU-1: flow 0 L/min, no pump running → 16 GPUs in A01–A02 in thermal slowdown"
    assert update.body["text"].startswith(f"CRITICAL update: {story}")

    pumps_at(70, 2)
    gpus_at(70, hot)
    evaluate(T0 + 70)  # pumps back, the GPUs still hot: the incident goes on
    pumps_at(130, 2)
    gpus_at(130, [*hot, gpus_of("A04")[0]])  # another rack's GPU: its own message
    evaluate(T0 + 130)
    assert texts(sent(slack))[2].startswith("CRITICAL: gpu-a04-01 GPU 0")  # A04 is air-cooled
    pumps_at(140, 2)
    gpus_at(140, [])
    evaluate(T0 + 140)  # the GPUs recover: one resolved message, as announced
    resolved = [t for t in texts(sent(slack)) if "CDU-1" in t and t.startswith("Resolved")]
    assert len(resolved) == 1 and resolved[0].startswith(f"Resolved: {story}")


def test_thermal_alerts_of_a_rack_on_a_healthy_loop_are_their_own_message(
    slack: SlackReceiver, site: None
) -> None:
    pump_rule()
    slowdown_rule()
    pumps_at(0, 2)
    gpus_at(0, gpus_of("A01"))
    evaluate(T0)
    (message,) = sent(slack)
    assert message.body["text"].startswith("CRITICAL: HW thermal slowdown: 8 GPUs in rack A01")


def test_a_silence_holds_back_matching_alerts_until_it_ends(
    slack: SlackReceiver, site: None
) -> None:
    slowdown_rule()
    Silence.objects.create(
        matchers=[{"label": "rack", "op": "=", "value": "A04"}],
        starts_at=dt.datetime.fromtimestamp(T0 - 60, dt.UTC),
        ends_at=dt.datetime.fromtimestamp(T0 + 15, dt.UTC),
        created_by="ops",
        comment="swapping fans",
    )
    gpus_at(0, gpus_of("A04") + gpus_of("A01")[:1])
    evaluate(T0)
    (message,) = sent(slack)  # only A01's GPU: A04 is silenced
    assert "rack A01" in message.body["text"]
    gpus_at(10, gpus_of("A04") + gpus_of("A01")[:1])
    evaluate(T0 + 10)
    assert len(sent(slack)) == 1
    gpus_at(20, gpus_of("A04") + gpus_of("A01")[:1])
    evaluate(T0 + 20)  # the silence is over and A04 still slows down: now it is said
    later = sent(slack)[1]
    assert later.body["text"].startswith("CRITICAL: HW thermal slowdown: 72 GPUs in rack A04")


def test_maintenance_of_a_node_mutes_only_that_node(slack: SlackReceiver, site: None) -> None:
    slowdown_rule()
    node = Node.objects.get(name="gpu-a04-01")
    MaintenanceWindow.objects.create(
        node=node,
        starts_at=dt.datetime.fromtimestamp(T0 - 60, dt.UTC),
        ends_at=dt.datetime.fromtimestamp(T0 + 3600, dt.UTC),
        created_by="ops",
        comment="reseating GPUs",
    )
    gpus_at(0, gpus_of("A04"))
    evaluate(T0)
    (message,) = sent(slack)
    assert message.body["text"].startswith("CRITICAL: HW thermal slowdown: 64 GPUs in rack A04")
    assert "gpu-a04-01" not in text_of(message)


def test_maintenance_of_a_rack_sends_nothing_for_it(slack: SlackReceiver, site: None) -> None:
    slowdown_rule()
    MaintenanceWindow.objects.create(
        rack=Rack.objects.get(name="A04"),
        starts_at=dt.datetime.fromtimestamp(T0 - 60, dt.UTC),
        ends_at=dt.datetime.fromtimestamp(T0 + 3600, dt.UTC),
        created_by="ops",
        comment="rack move",
    )
    gpus_at(0, gpus_of("A04"))
    evaluate(T0)
    gpus_at(10, [])
    evaluate(T0 + 10)
    assert sent(slack) == []
    assert AlertInstance.objects.filter(state="resolved").count() == 72  # history is kept


def test_a_firing_alert_is_repeated_until_acknowledged(
    slack: SlackReceiver, site: None, settings: Any
) -> None:
    slowdown_rule(repeat_interval=dt.timedelta(minutes=30))
    hot = gpus_of("A01")[:1]
    for at in (0, 1800):
        gpus_at(at, hot)
        evaluate(T0 + at)
    first, repeat = sent(slack)
    assert first.body["text"].startswith("CRITICAL: ")
    assert repeat.body["text"].startswith("CRITICAL still firing: ")
    inst = AlertInstance.objects.get(state="firing")
    inst.acknowledged_at = dt.datetime.fromtimestamp(T0 + 1810, dt.UTC)
    inst.acknowledged_by, inst.ack_comment = "dana", "on it: replacing the cold plate"
    inst.save()
    for at in (3600, 5400):
        gpus_at(at, hot)
        evaluate(T0 + at)
    assert len(sent(slack)) == 2  # acknowledged: no more repeats
    gpus_at(5410, [])
    evaluate(T0 + 5410)
    assert texts(sent(slack))[2].startswith("Resolved: ")  # still resolves and says so


@pytest.mark.parametrize(
    ("matchers", "error"),
    [
        ([], "at least one matcher"),
        ([{"label": "rack", "op": "==", "value": "A01"}], "is not one of"),
        ([{"label": "Rack", "op": "=", "value": "A01"}], "is not a label name"),
        ([{"label": "rack", "op": "=~", "value": "A0[1"}], "is not a regular expression"),
        ([{"label": "rack", "op": "=~", "value": ".*"}], "would mute all"),
        ([{"label": "rack", "value": "A01"}], "needs exactly the keys"),
    ],
)
def test_a_bad_silence_is_refused_with_its_reason(matchers: Any, error: str) -> None:
    silence = Silence(
        matchers=matchers,
        starts_at=dt.datetime.fromtimestamp(T0, dt.UTC),
        ends_at=dt.datetime.fromtimestamp(T0 + 60, dt.UTC),
        created_by="ops",
        comment="x",
    )
    with pytest.raises(ValidationError) as refused:
        silence.full_clean()
    assert error in str(refused.value)


def test_a_silence_that_ends_before_it_starts_is_refused() -> None:
    silence = Silence(
        matchers=[{"label": "rack", "op": "=", "value": "A01"}],
        starts_at=dt.datetime.fromtimestamp(T0, dt.UTC),
        ends_at=dt.datetime.fromtimestamp(T0 - 60, dt.UTC),
        created_by="ops",
        comment="x",
    )
    with pytest.raises(ValidationError, match="must end after it starts"):
        silence.full_clean()


def test_a_maintenance_window_names_exactly_one_place(site: None) -> None:
    window = MaintenanceWindow(
        starts_at=dt.datetime.fromtimestamp(T0, dt.UTC),
        ends_at=dt.datetime.fromtimestamp(T0 + 60, dt.UTC),
        created_by="ops",
        comment="x",
    )
    with pytest.raises(ValidationError, match="exactly one of site, rack, node or cooling loop"):
        window.full_clean()


def test_a_loop_failing_many_ways_names_two_in_the_title_and_all_in_the_message(
    slack: SlackReceiver, site: None
) -> None:
    pump_rule()
    flow_rule()
    AlertRule.objects.create(
        key="pumps-failed",
        name="CDU pump failed",
        scope="loop",
        signal="pumps_failed",
        comparison="ge",
        threshold=1,
        severity="warning",
        summary="{loop}: {value:.0f} pump(s) failed",
    )
    loop = CoolingLoop.objects.get(name="CDU-1")
    store("loop", (loop.pk,), T0, pumps_running=0, flow_lpm=0.0, pumps_failed=3)
    evaluate(T0)
    (message,) = sent(slack)
    assert message.body["text"].startswith(
        "CRITICAL: CDU-1: flow 0 L/min, no pump running, 1 more; it cools A01–A02"
    )
    assert "Its alerts: flow 0 L/min; no pump running; 3 pump(s) failed." in text_of(message)
