"""Firing and resolved instances are notified exactly once each: the engine run in-process
against latest state written through `merge_latest`, its deliveries tried in-process (as in
tests/notifications/test_delivery.py) against a local receiver that answers like Slack."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

import pytest

from fleet.alerts.engine import evaluate
from fleet.alerts.grouping import Places
from fleet.alerts.models import AlertInstance, AlertRule
from fleet.alerts.notify import notify_groups
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import GPU, Node
from fleet.notifications.models import Delivery, Route
from tests.support import alert_engine
from tests.support.alert_engine import T0, sent, text_of
from tests.support.latest import store_latest as store
from tests.support.slack_receiver import SlackReceiver

pytestmark = pytest.mark.django_db


only_our_rules = alert_engine.our_rules_only  # autouse


@pytest.fixture
def node() -> Node:
    seed_demo_site("lon1", (replace(DEMO_RACKS[0], nodes=1),), gpus_per_node=2)
    GPU.objects.update(slowdown_c=87.0, model="H200", uuid="GPU-abc")
    return Node.objects.select_related("rack__hall__site").get()


def headroom_rule(**fields: Any) -> AlertRule:
    return AlertRule.objects.create(
        **{
            "key": "headroom",
            "name": "GPU near slowdown",
            "scope": "gpu",
            "signal": "headroom_slowdown_c",
            "comparison": "le",
            "threshold": 3.0,
            "clear_threshold": 5.0,
            "severity": "critical",
            "summary": "{node} GPU {gpu} ({gpu_model}) {value:.0f} {unit} from slowdown",
            "runbook_url": "https://runbooks.example/gpu-hot",
            **fields,
        }
    )


def gpu_at(node: Node, offset: float, temp: float) -> dict[str, int]:
    """A fresh sample of GPU 0 at T0 + offset (GPU 1 stays cool), then an evaluation."""
    store("gpu", (node.id, 0), T0 + offset, temp_gpu_c=temp)
    store("gpu", (node.id, 1), T0 + offset, temp_gpu_c=60.0)
    return evaluate(T0 + offset)


def test_a_rule_firing_sends_one_message_naming_the_gpu_its_value_and_threshold(
    slack: SlackReceiver, node: Node
) -> None:
    headroom_rule()
    assert gpu_at(node, 0, 85.0)["notified"] == 1  # 2 °C from slowdown
    (message,) = sent(slack)
    text = text_of(message)
    rack = node.rack
    assert message.body["text"].startswith(f"CRITICAL: {node.name} GPU 0 (H200) 2 °C from")
    where = f"site {rack.hall.site.name} / hall {rack.hall.name} / rack {rack.name}"
    assert f"{where} / node {node.name} / GPU 0" in text
    assert "2 °C (threshold 3 °C)" in text
    assert "https://runbooks.example/gpu-hot" in text
    inst = AlertInstance.objects.get()
    assert inst.notified_firing_at is not None and inst.notified_resolved_at is None


def test_evaluating_again_while_firing_sends_nothing_more(slack: SlackReceiver, node: Node) -> None:
    headroom_rule()
    gpu_at(node, 0, 85.0)
    assert gpu_at(node, 10, 85.5)["notified"] == 0  # still firing
    assert evaluate(T0 + 100)["notified"] == 0  # stale: firing with no data
    assert gpu_at(node, 110, 85.0)["notified"] == 0  # data back
    assert gpu_at(node, 120, 83.5)["notified"] == 0  # between threshold and clear: firing
    assert len(sent(slack)) == 1
    assert Delivery.objects.count() == 1


def test_resolving_sends_one_resolved_message_with_how_long_it_fired(
    slack: SlackReceiver, node: Node
) -> None:
    headroom_rule()
    gpu_at(node, 0, 85.0)
    gpu_at(node, 300, 85.0)
    assert gpu_at(node, 750, 80.0)["notified"] == 1  # 7 °C: past the clear threshold
    assert gpu_at(node, 760, 80.0)["notified"] == 0
    _, resolved = sent(slack)
    # the headline as announced; the value it resolved at in the fields
    assert resolved.body["text"].startswith(f"Resolved: {node.name} GPU 0 (H200) 2 °C from")
    assert "7 °C (threshold 3 °C)" in text_of(resolved)
    assert resolved.body["text"].endswith("lasted 12 min")
    assert "*Lasted*\\n12 min" in text_of(resolved)
    assert AlertInstance.objects.get().notified_resolved_at is not None


def test_a_pending_instance_that_never_fires_sends_nothing(
    slack: SlackReceiver, node: Node
) -> None:
    headroom_rule(for_duration=dt.timedelta(seconds=60))
    gpu_at(node, 0, 85.0)
    gpu_at(node, 30, 85.0)
    gpu_at(node, 40, 80.0)  # dropped before for_duration
    assert AlertInstance.objects.get().state == "resolved"
    assert sent(slack) == []
    assert not Delivery.objects.exists()


def test_a_rule_held_for_its_for_duration_notifies_when_it_fires_not_when_pending(
    slack: SlackReceiver, node: Node
) -> None:
    headroom_rule(for_duration=dt.timedelta(seconds=60))
    assert gpu_at(node, 0, 85.0)["notified"] == 0
    assert gpu_at(node, 60, 85.0)["notified"] == 1
    (message,) = sent(slack)
    assert message.body["text"].startswith("CRITICAL:")


def test_a_group_message_is_claimed_once_however_often_it_is_settled(
    slack: SlackReceiver, node: Node
) -> None:
    headroom_rule()
    gpu_at(node, 0, 85.0)  # fires and is announced
    at = dt.datetime.fromtimestamp(T0, dt.UTC)
    assert notify_groups(at, Places()) == 0  # a second settling (another evaluation): nothing
    gpu_at(node, 10, 80.0)  # resolves and is announced
    assert notify_groups(dt.datetime.fromtimestamp(T0 + 10, dt.UTC), Places()) == 0
    assert [d.kind for d in Delivery.objects.order_by("pk")] == ["firing", "resolved"]
    inst = AlertInstance.objects.get()
    assert inst.notified_firing_at is not None and inst.notified_resolved_at is not None


def test_a_summary_that_does_not_render_falls_back_to_the_rule_name(
    slack: SlackReceiver, node: Node
) -> None:
    headroom_rule(summary="{node:.1f} is hot")  # a name is no number
    gpu_at(node, 0, 85.0)
    (message,) = sent(slack)
    assert message.body["text"].startswith("CRITICAL: GPU near slowdown (")


def test_a_notice_goes_to_the_route_of_the_entitys_site_not_the_default(
    slack: SlackReceiver, node: Node
) -> None:
    site = node.rack.hall.site
    Route.objects.create(name="lon", webhook_url=slack.url("/lon"), site=site)
    headroom_rule()
    gpu_at(node, 0, 85.0)
    assert sent(slack) == []  # nothing at the SLACK_WEBHOOK_URL route
    assert len(slack.received("/lon")) == 1


def test_a_relative_dashboard_link_is_left_out_of_the_slack_message(
    slack: SlackReceiver, node: Node, settings: Any
) -> None:
    headroom_rule()
    gpu_at(node, 0, 85.0)
    settings.FLEETWATCH_BASE_URL = "https://fleet.example"
    gpu_at(node, 10, 80.0)  # resolves
    firing, resolved = sent(slack)
    assert "Dashboard" not in text_of(firing)  # no base URL: "/" only, Slack refuses it
    assert '"url": "https://fleet.example/"' in text_of(resolved)
