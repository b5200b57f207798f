"""The NVLink rules through the engine (docs/rules.md, *Fabric*): a GPU's NVLink error totals
as its agent sends them every 60 s, stored and rolled up to the 1-minute tier as the server
does; CRC errors at DCGM's failing rate (100 a second) fire for that GPU and resolve once
they stop, a slower rate does not, and one replay or recovery error fires."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fleet.alerts.engine import evaluate
from fleet.alerts.messages import render_summary
from fleet.alerts.models import AlertInstance, AlertRule
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import Node
from fleet.storage.rollups import rollup
from tests.support.alert_engine import T0
from tests.support.latest import store_latest

pytestmark = pytest.mark.django_db

READ_S = 60.0  # the agent's NVLink reads (slow lane)
CRC, LINKS = "gpu-nvlink-crc-rate", "gpu-nvlink-errors"


@pytest.fixture
def node() -> Node:
    """A node of two GPUs, and of the pack only the NVLink rules."""
    seed_demo_site("demo", (replace(DEMO_RACKS[0], nodes=1),), gpus_per_node=2)
    AlertRule.objects.exclude(key__in=(CRC, LINKS)).update(enabled=False)
    return Node.objects.get()


class Gpus:
    """The node's two GPUs' NVLink totals, sent every READ_S, rolled up and evaluated."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self.now = T0 - 3 * 3600  # whole minutes of history behind every evaluation
        self.totals = [dict.fromkeys(("crc", "replay", "recovery"), 0) for _ in range(2)]

    def run(self, seconds: float, crc_per_s: float = 0.0, gpu: int = 1) -> None:
        for _ in range(max(1, round(seconds / READ_S))):
            self.totals[gpu]["crc"] += round(crc_per_s * READ_S)
            self.send()

    def once(self, counter: str, gpu: int = 1) -> None:
        self.totals[gpu][counter] += 1
        self.send()

    def send(self) -> None:
        for gpu, t in enumerate(self.totals):
            store_latest(
                "gpu",
                (self.node.id, gpu),
                self.now,
                nvlink_crc_errors_total=t["crc"],
                nvlink_replay_total=t["replay"],
                nvlink_recovery_total=t["recovery"],
            )
        rollup("1m", "gpu", self.now)
        evaluate(self.now + 1)
        self.now += READ_S


def firing() -> dict[str, str]:
    return dict(AlertInstance.objects.filter(state="firing").values_list("rule__key", "entity"))


def said(key: str) -> str:
    inst = AlertInstance.objects.get(rule__key=key)
    names = {"node": "gpu-a01-01", "gpu": inst.entity.split(":")[1], "value": inst.value}
    return render_summary(inst.rule.summary, names, "")


def test_crc_errors_at_dcgms_rate_fire_for_that_gpu_and_resolve_once_they_stop(
    node: Node,
) -> None:
    gpus = Gpus(node)
    gpus.run(5 * 60)
    gpus.run(10 * 60, crc_per_s=200)
    assert firing() == {CRC: f"{node.id}:1"}
    assert said(CRC).startswith("gpu-a01-01 GPU 1: NVLink CRC errors ")
    assert said(CRC).endswith(" a second (limit 100)")
    gpus.run(12 * 60)
    assert firing() == {}
    assert AlertInstance.objects.get(rule__key=CRC).state == "resolved"


def test_crc_errors_under_dcgms_rate_fire_nothing(node: Node) -> None:
    gpus = Gpus(node)
    gpus.run(20 * 60, crc_per_s=50)
    assert firing() == {}
    assert gpus.totals[1]["crc"] == 50 * 20 * 60  # they did rise


def test_one_recovery_error_fires_and_resolves_after_the_window(node: Node) -> None:
    gpus = Gpus(node)
    gpus.run(10 * 60)
    gpus.once("recovery", gpu=0)
    gpus.run(6 * 60)
    assert firing() == {LINKS: f"{node.id}:0"}
    assert said(LINKS) == "gpu-a01-01 GPU 0: 1 NVLink replay/recovery errors in the last 5–10 min"
    gpus.run(10 * 60)
    assert firing() == {}
