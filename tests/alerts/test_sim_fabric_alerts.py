"""The simulator's flap fault end to end: its fake sysfs tree read by the agent's fabric
collector, the reads stored by the ingest pipeline, the engine judging them — the port's
`link_flap` events are stored and the flap rules fire naming it; a healthy simulated node
fires none."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleet.alerts.engine import evaluate
from fleet.alerts.models import AlertInstance, AlertRule
from fleet.alerts.rulepack_fabric import FABRIC_RULES
from fleet.ingest.pipeline import IngestPipeline
from fleet.models import Event, FabricPort, Node
from fleet.storage.fabric import LINK_FLAP
from fleetsim.fabric import SimFabric
from fleetsim.faults import FaultPlan, parse_fault
from fleetsim.fleet import SiteModel
from fleetsim.inventory import parse_inventory
from tests.support import one_node
from tests.support.fabric_tree import send_fabric
from tests.support.stub_server import SMALL_SITE

pytestmark = pytest.mark.django_db

node = one_node.node  # gpu-a01-01 of 8 GPUs, as the simulator's site names it too
pipeline = one_node.pipeline
READ_S = 10.0


def run(pipeline: IngestPipeline, node: Node, tmp_path: Path, seconds: float, *faults: str) -> None:
    """The simulated node's ports read every 10 s for `seconds`, stored and evaluated."""
    AlertRule.objects.exclude(key__in=[r.key for r in FABRIC_RULES]).update(enabled=False)
    plan = FaultPlan([parse_fault(f) for f in faults])
    sim = SimFabric(SiteModel(parse_inventory(SMALL_SITE), plan, seed=3), tmp_path / "sysfs")
    start = time.time() - 3600
    for i in range(int(seconds / READ_S) + 1):
        ts = start + i * READ_S
        send_fabric(pipeline, node.source, i + 1, sim.read(node.name, ts, i * READ_S).fabric)
        evaluate(ts + 0.5)


def firing() -> dict[str, str]:
    return {
        i.rule.key: i.labels.get("port", "")
        for i in AlertInstance.objects.filter(state="firing").select_related("rule")
    }


def test_the_flap_fault_stores_link_flap_events_and_fires_the_flap_rules(
    pipeline: IngestPipeline, node: Node, tmp_path: Path
) -> None:
    run(pipeline, node, tmp_path, 150, f"ib-port-flap:{node.name}/4@60s,every=60")
    assert FabricPort.objects.filter(node=node).count() == 8
    flaps = Event.objects.filter(kind=LINK_FLAP, node=node).order_by("ts")
    assert [e.detail for e in flaps] == [
        "mlx5_4 port 1: link_downed 0 → 1",
        "mlx5_4 port 1: link_downed 1 → 2",
    ]
    assert firing() == {
        "node-fabric-port-flapped": "mlx5_4 port 1",
        "node-fabric-port-flapping": "mlx5_4 port 1",
    }


def test_a_healthy_simulated_node_fires_nothing(
    pipeline: IngestPipeline, node: Node, tmp_path: Path
) -> None:
    run(pipeline, node, tmp_path, 900)
    assert FabricPort.objects.filter(node=node, state="ACTIVE").count() == 8
    assert AlertInstance.objects.count() == 0
