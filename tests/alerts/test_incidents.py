"""Incidents: consequences join their cause, the cause's recovery is said once, a lost GPU
is one state, and the incident ends with a summary (docs/rules.md, "Grouping:
consequences" and "Notifications").

The engine runs in-process at explicit times against latest state written through
`merge_latest`, and agent events stored as the ingest stores them; deliveries are tried
in-process against a local receiver that answers like Slack (as test_grouping.py)."""

from __future__ import annotations

import datetime as dt

import pytest

from fleet.alerts.engine import evaluate
from fleet.alerts.grouping import Places
from fleet.alerts.messages import gpu_hours_words, incident_summary
from fleet.alerts.models import AlertGroup, AlertInstance, AlertInstanceEvent, AlertRule
from fleet.alerts.notify import notify_groups
from fleet.models import CoolingLoop, Event, Node, Rack
from fleet.notifications.models import Delivery
from fleet.notifications.notice import Notice, duration_words
from fleet.notifications.slack import build_message
from tests.support import alert_engine
from tests.support.alert_engine import (
    HW_SLOWDOWN,
    T0,
    flow_rule,
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
from tests.support.sources import source_token

pytestmark = pytest.mark.django_db


only_our_rules = alert_engine.grouping_rules_only  # autouse
site = alert_engine.grouping_site


def off_the_bus_rules() -> None:
    AlertRule.objects.create(
        key="xid-fatal",
        name="Fatal XID",
        scope="gpu",
        signal="xid_events",
        params={"codes": [79], "window_s": 600},
        comparison="ge",
        threshold=1,
        severity="critical",
        summary="{node} GPU {gpu} reported a fatal XID",
    )
    AlertRule.objects.create(
        key="missing",
        name="GPU missing from its node",
        scope="gpu",
        signal="gpu_missing",
        comparison="ge",
        threshold=1,
        severity="critical",
        summary="{node} GPU {gpu} sends nothing",
    )


def gpus_report(at: float, hot: list[tuple[int, int]], gone: list[tuple[int, int]]) -> None:
    """A sample of every node of A01, A02 and A04 and of their GPUs but the `gone` ones at
    T0 + at: a node reports while its GPUs are off the bus."""
    for node_id in Node.objects.filter(rack__name__in=("A01", "A02", "A04")).values_list(
        "pk", flat=True
    ):
        store("node", (node_id,), T0 + at, cpu_pct=10.0)
    for key in gpus_of("A01", "A02", "A04"):
        if key not in gone:
            store("gpu", key, T0 + at, clock_event_reasons=HW_SLOWDOWN if key in hot else 0)


def fall_off_the_bus(gpus: list[tuple[int, int]], at: float) -> None:
    """What an agent reports when a GPU trips: XID 79, then `gpu_lost`."""
    for node_id, index in gpus:
        node = Node.objects.get(pk=node_id)
        for kind, code in (("xid", 79), ("gpu_lost", None)):
            seq = Event.objects.count()
            Event.objects.create(
                source=node.source,
                seq=seq,
                pos=0,
                ts=T0 + at,
                node=node,
                gpu_index=index,
                kind=kind,
                code=code,
            )


def step(at: float, pumps: int, hot: list[tuple[int, int]], gone: list[tuple[int, int]]) -> None:
    pumps_at(at, pumps)
    gpus_report(at, hot, gone)
    evaluate(T0 + at)


def test_a_cdu_failure_is_one_thread_from_slowdown_to_gpus_off_the_bus_to_reset(
    slack: SlackReceiver, site: None
) -> None:
    pump_rule()
    slowdown_rule()
    off_the_bus_rules()
    hot = gpus_of("A01", "A02")
    lost = [g for g in hot if g[0] == Node.objects.get(name="gpu-a01-01").pk]
    assert len(hot) == 16 and len(lost) == 4
    step(0, 0, [], [])  # the pumps stop: the loop's message
    step(20, 0, hot, [])  # its GPUs slow down
    step(60, 0, hot, [])  # an update, a group interval after the first message
    fall_off_the_bus(lost, 65)
    step(70, 0, hot, lost)  # the XIDs join the loop's incident: no incident of their own
    step(100, 0, hot, lost)  # their samples are 40 s old: lost (missing from the node)
    step(120, 0, hot, lost)  # the next update says what happened to them
    messages = texts(sent(slack))
    assert len(messages) == 3, messages
    assert messages[1].startswith(
        "CRITICAL update: CDU-1: no pump running → 16 GPUs in A01–A02 in thermal slowdown"
    )
    assert messages[2].startswith(
        "CRITICAL update: CDU-1: no pump running → 4 GPUs off the bus (XID 79) in A01"
    )
    keys = set(AlertInstance.objects.values_list("group__key", flat=True))
    assert keys == {f"loop:{pumps_loop_id()}"}, keys  # one incident, every alert in it

    # A lost GPU is one state: its slowdown ended, recorded on the instance and its history.
    lost_entities = {f"{n}:{i}" for n, i in lost}
    superseded = AlertInstance.objects.filter(rule__key="hw-slowdown", entity__in=lost_entities)
    assert {(i.state, i.superseded_by) for i in superseded} == {("resolved", "GPU lost")}
    ends = AlertInstanceEvent.objects.filter(instance__in=superseded, to_state="resolved")
    assert {e.superseded_by for e in ends} == {"GPU lost"} and ends.count() == 4

    step(140, 2, [], lost)  # the pumps are back, the other GPUs cool: said at once
    step(150, 2, [], lost)
    messages = texts(sent(slack))
    assert len(messages) == 4, messages
    assert messages[3].startswith(
        "CDU-1 recovered after 2 min 20 s (2 pumps running, 430 L/min); still open:"
        " 4 GPUs off the bus in A01 — reset needed"
    )

    step(200, 2, [], [])  # the GPUs are reset and report: their XIDs stop counting at once
    messages = texts(sent(slack))
    assert len(messages) == 5, messages
    assert messages[4].startswith(
        "Resolved: CDU-1: no pump running → 4 GPUs off the bus (XID 79) in A01"
    )
    resolved = sent(slack)[4]
    # 4 GPUs off the bus from their XID firing (70 s) to the reset (200 s): 520 GPU-seconds
    assert "16 GPUs affected; 4 GPUs off the bus, 0.14 GPU-hours lost" in text_of(resolved)
    assert resolved.body["text"].endswith("lasted 3 min")  # first fired → last resolved
    assert not AlertInstance.objects.filter(state__in=("pending", "firing")).exists()
    assert AlertGroup.objects.get().closed_at is not None


def test_every_member_of_an_incident_carries_its_key_as_the_incident_label(
    slack: SlackReceiver, site: None
) -> None:
    pump_rule()
    slowdown_rule()
    step(0, 0, [], [])
    step(20, 0, gpus_of("A01"), [])
    key = f"loop:{pumps_loop_id()}"
    labels = list(AlertInstance.objects.values_list("labels", flat=True))
    assert len(labels) == 9 and all(label["incident"] == key for label in labels)


def test_the_recovered_message_is_claimed_once_however_many_evaluations_look(
    slack: SlackReceiver, site: None
) -> None:
    pump_rule()
    slowdown_rule()
    off_the_bus_rules()
    hot = gpus_of("A01")[:1]
    step(0, 0, hot, [])
    fall_off_the_bus(hot, 5)
    step(10, 0, hot, hot)
    step(20, 2, [], hot)  # the cause resolves: the recovered message is owed
    at = dt.datetime.fromtimestamp(T0 + 20, dt.UTC)
    assert notify_groups(at, Places()) == 0  # a second look at the same moment: claimed
    assert notify_groups(at + dt.timedelta(seconds=10), Places()) == 0
    assert Delivery.objects.filter(kind="recovered").count() == 1


def test_an_xid_of_a_gpu_that_was_never_hot_is_not_put_down_to_the_loop(
    slack: SlackReceiver, site: None
) -> None:
    pump_rule()
    off_the_bus_rules()
    cool = gpus_of("A01")[:1]
    step(0, 0, [], [])
    fall_off_the_bus(cool, 5)
    step(10, 0, [], cool)
    xid = AlertInstance.objects.get(rule__key="xid-fatal")
    assert xid.group is not None and xid.group.key.endswith(":xid-fatal")
    assert len(AlertGroup.objects.filter(closed_at__isnull=True)) == 2


def test_gpus_lost_in_a_rack_over_its_power_budget_join_the_rack_power_incident(
    slack: SlackReceiver, site: None
) -> None:
    AlertRule.objects.create(
        key="rack-over-budget",
        name="Rack power at or over budget",
        scope="rack",
        signal="rack_power_fraction",
        comparison="ge",
        threshold=1.0,
        severity="critical",
        summary="{rack} draws {value:.0%} of its power budget",
    )
    off_the_bus_rules()
    rack = Rack.objects.get(name="A04")
    node = Node.objects.get(name="gpu-a04-01")
    gone = [g for g in gpus_of("A04") if g[0] == node.pk]
    for at, gpus_gone in ((0, []), (40, gone)):
        store("rack", (rack.pk,), T0 + at, power_w=rack.power_budget_kw * 1050.0)
        gpus_report(at, [], gpus_gone)
        evaluate(T0 + at)
    keys = set(AlertInstance.objects.values_list("group__key", flat=True))
    assert keys == {f"rack:{rack.pk}:rack-over-budget"}
    missing = AlertInstance.objects.filter(rule__key="missing", state="firing").count()
    assert missing == 8
    store("rack", (rack.pk,), T0 + 100, power_w=rack.power_budget_kw * 1050.0)
    gpus_report(100, [], gone)
    evaluate(T0 + 100)  # a group interval on: the update says what the overload took down
    update = texts(sent(slack))[-1]
    assert update.startswith(
        "CRITICAL update: A04 draws 105% of its power budget → 8 GPUs off the bus in A04"
    ), update
    store("rack", (rack.pk,), T0 + 110, power_w=rack.power_budget_kw * 500.0)
    gpus_report(110, [], gone)
    evaluate(T0 + 110)  # the load is shed: said at once, the node's GPUs still gone
    recovered = texts(sent(slack))[-1]
    assert recovered.startswith(
        "rack A04 recovered after 1 min 50 s (A04 draws 50% of its power budget); still open:"
        " 8 GPUs off the bus in A04 — reset needed"
    ), recovered


def test_a_node_of_a_cooled_rack_going_silent_joins_the_loops_incident(
    slack: SlackReceiver, site: None
) -> None:
    pump_rule()
    AlertRule.objects.create(
        key="node-silent",
        name="Node agent silent",
        scope="node",
        signal="agent_silent_intervals",
        params={"interval_s": 1.0},
        comparison="ge",
        threshold=3,
        severity="warning",
        summary="{node}: no batch for {value:.0f} intervals",
    )
    node = Node.objects.get(name="gpu-a01-02")
    # it stopped sending 10 s before the evaluation at 60
    source_token(node.source, "node", node.rack.hall.site, last_seen=T0 + 50)
    step(0, 0, [], [])
    step(60, 0, [], [])
    silent = AlertInstance.objects.get(rule__key="node-silent")
    assert silent.group is not None and silent.group.key == f"loop:{pumps_loop_id()}"
    update = texts(sent(slack))[-1]
    assert update.startswith("CRITICAL update: CDU-1: no pump running → 1 node silent in A01")


def test_duration_and_gpu_hours_read_as_an_operator_says_them() -> None:
    assert duration_words(dt.timedelta(seconds=182)) == "3 min 2 s"
    assert duration_words(dt.timedelta(seconds=45)) == "45 s"
    assert duration_words(dt.timedelta(minutes=72, seconds=5)) == "1 h 12 min"
    assert gpu_hours_words(2.74) == "2.7 GPU-hours"
    assert gpu_hours_words(0.144) == "0.14 GPU-hours"
    assert incident_summary([]) == ""


def test_a_recovered_message_leads_with_its_own_words_and_a_green_icon() -> None:
    notice = Notice(
        kind="recovered",
        severity="critical",
        title="CDU-1 recovered after 3 min 2 s (3 pumps running, 115 L/min); still open:"
        " 33 GPUs off the bus in A01–A02 — reset needed",
    )
    message = build_message(notice)
    assert message["text"].startswith("CDU-1 recovered after 3 min 2 s")
    header = message["blocks"][0]["text"]["text"]
    assert header.startswith(":large_green_circle: CDU-1 recovered")


def pumps_loop_id() -> int:
    return CoolingLoop.objects.get(name="CDU-1").pk


def test_a_resolved_loop_message_does_not_restate_its_alerts_at_their_resolved_values(
    slack: SlackReceiver, site: None
) -> None:
    pump_rule()
    flow_rule()
    AlertRule.objects.create(
        key="pumps-short",
        name="CDU pumps short",
        scope="loop",
        signal="pumps_running",
        comparison="lt",
        threshold=2,
        severity="warning",
        summary="{loop}: {value:.0f} pump(s) running",
    )
    step(0, 0, [], [])  # three loop alerts: the cause line lists them
    step(30, 2, [], [])  # the pumps are back: resolved
    firing, resolved = sent(slack)
    assert "Its alerts: flow 0 L/min; no pump running; 0 pump(s) running." in text_of(firing)
    assert resolved.body["text"].startswith("Resolved: CDU-1: flow 0 L/min, no pump running")
    # Re-rendered at the values they resolved with they would contradict the title
    # ("no pump running; flow 430 L/min").
    assert "Its alerts" not in text_of(resolved) and "430" not in text_of(resolved)
