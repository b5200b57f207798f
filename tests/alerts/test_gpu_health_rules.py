"""The built-in rules for the health record's state changes (docs/gpu-health.md), through the
engine: a pending row remap fires "reset needed" for that GPU and resolves once a reset
clears the flag; a GPU that fell off the bus twice in a week fires "replace", once does not,
and neither does twice eight days apart."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fleet.alerts.engine import evaluate
from fleet.alerts.messages import render_summary
from fleet.alerts.models import AlertInstance, AlertRule
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import Event, Node
from tests.support.alert_engine import T0
from tests.support.latest import store_latest

pytestmark = pytest.mark.django_db

DAY = 86_400
RULES = ("gpu-row-remap-pending", "gpu-off-the-bus-repeated")


@pytest.fixture
def node() -> Node:
    """A node of two GPUs, and of the built-in pack only the health record's rules."""
    seed_demo_site("demo", (replace(DEMO_RACKS[0], nodes=1),), gpus_per_node=2)
    AlertRule.objects.exclude(key__in=RULES).update(enabled=False)
    return Node.objects.get()


def off_the_bus(n: Node, gpu: int, at: float) -> None:
    seq = Event.objects.count()
    Event.objects.create(
        source=n.source, seq=seq, pos=0, ts=at, node=n, gpu_index=gpu, kind="xid", code=79
    )


def said(inst: AlertInstance) -> str:
    """The instance's summary as its messages word it."""
    names = {"node": inst.node.name if inst.node else "", "gpu": inst.entity.split(":")[1]}
    return render_summary(inst.rule.summary, {**names, "value": inst.value}, "")


def firing() -> dict[str, str]:
    return dict(AlertInstance.objects.filter(state="firing").values_list("entity", "rule__key"))


def test_a_pending_remap_fires_reset_needed_until_a_reset_clears_it(node: Node) -> None:
    store_latest("gpu", (node.id, 1), T0 - 5, remap_pending=1, temp_gpu_c=60.0)
    store_latest("gpu", (node.id, 0), T0 - 5, remap_pending=0, temp_gpu_c=60.0)
    evaluate(T0)
    assert firing() == {f"{node.id}:1": "gpu-row-remap-pending"}
    assert said(AlertInstance.objects.get()) == (
        "gpu-a01-01 GPU 1 has a row remap pending: reset needed to apply it"
    )
    store_latest("gpu", (node.id, 1), T0 + 55, remap_pending=0, temp_gpu_c=60.0)
    evaluate(T0 + 60)
    assert firing() == {}


def test_falling_off_the_bus_twice_in_a_week_fires_replace(node: Node) -> None:
    off_the_bus(node, 0, T0 - 5 * DAY)
    off_the_bus(node, 0, T0 - 10)
    off_the_bus(node, 1, T0 - 10)  # once
    evaluate(T0)
    assert firing() == {f"{node.id}:0": "gpu-off-the-bus-repeated"}
    assert said(AlertInstance.objects.get()) == (
        "gpu-a01-01 GPU 0 fell off the bus 2 times in 7 days: replace"
    )


def test_falling_off_the_bus_twice_eight_days_apart_does_not(node: Node) -> None:
    off_the_bus(node, 0, T0 - 8 * DAY)
    off_the_bus(node, 0, T0 - 10)
    evaluate(T0)
    assert firing() == {}
