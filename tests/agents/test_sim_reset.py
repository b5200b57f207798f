"""The simulator's `gpu-reset` fault step: one GPU (`NODE/INDEX`) or every lost GPU of a
node (`NODE`) back on the bus at a chosen moment, so a test or a demo ends an incident
when it chooses (docs/simulator.md, "Faults")."""

from __future__ import annotations

import re
import time

import pytest

from agents.protocol import reasons
from fleetsim.faults import FaultPlan, FaultSpecError, parse_fault
from fleetsim.fleet import SiteModel
from fleetsim.inventory import parse_inventory
from tests.support.sim_scenarios import pump_failure_site
from tests.support.stub_server import SMALL_SITE


def _site(faults: list[str]) -> SiteModel:
    model = SiteModel(parse_inventory(SMALL_SITE), FaultPlan([parse_fault(f) for f in faults]), 1)
    for node in model.nodes.values():
        node.workload.kind, node.workload.load, node.workload.remaining_s = "training", 1.0, 1e9
    return model


def _run(model: SiteModel, until: int, start: int = 0) -> None:
    for t in range(start, until):
        model.step(1.0, float(t), wall=1_795_996_000.0 + t)


def _reporting(model: SiteModel, node: str) -> set[int]:
    reading = model.node_reading(node, time.time(), with_info=False)
    return {s["gpu"] for s in reading.samples.get("gpu", [])}


def test_a_reset_step_names_one_gpu_or_a_node_at_one_moment() -> None:
    one = parse_fault("gpu-reset:gpu-a01-03/2@4m")
    assert (one.kind, one.target, one.start_s, one.duration_s) == (
        "gpu-reset",
        "gpu-a01-03/2",
        240.0,
        None,
    )
    assert parse_fault("gpu-reset:gpu-a01-03@90s").target == "gpu-a01-03"


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("gpu-reset@4m", "gpu-reset needs a target (node/gpu or node)"),
        ("gpu-reset:gpu-a01-03@4m+1m", "gpu-reset happens at one moment"),
    ],
)
def test_a_reset_step_without_a_target_or_with_a_duration_is_refused(
    spec: str, reason: str
) -> None:
    with pytest.raises(FaultSpecError, match=re.escape(reason)):
        parse_fault(spec)


def test_resetting_one_gpu_brings_only_it_back_and_a_node_reset_the_rest() -> None:
    model = _site(
        [
            "gpu-xid:gpu-a01-01/2@1",  # XID 79 with no duration: lost until reset
            "gpu-xid:gpu-a01-01/3@1",
            "gpu-reset:gpu-a01-01/2@10",
            "gpu-reset:gpu-a01-01@20",
        ]
    )
    node = "gpu-a01-01"
    _run(model, 5)
    assert _reporting(model, node) == set(range(8)) - {2, 3}
    _run(model, 15, start=5)
    assert _reporting(model, node) == set(range(8)) - {3}
    _run(model, 25, start=15)
    assert _reporting(model, node) == set(range(8))


def test_a_tripped_gpu_is_back_at_the_reset_before_the_automatic_one() -> None:
    # The pumps stop for 11 minutes: GPUs trip from ~540 s on; the automatic reset would
    # bring one back 5 min after its trip at the earliest (~850 s).
    model = _site(["cdu-pump-fail:CDU-1@0+11m", "gpu-reset:gpu-a01-01@700"])
    _run(model, 690)
    lost = {name: {g.index for g in model.nodes[name].gpus if g.lost} for name in model.nodes}
    assert lost["gpu-a01-01"] and lost["gpu-a01-02"]
    _run(model, 710, start=690)
    assert _reporting(model, "gpu-a01-01") == set(range(8))
    assert _reporting(model, "gpu-a01-02") == set(range(8)) - lost["gpu-a01-02"]  # not reset


# -- the premise of tests/alerts/test_cdu_pump_failure.py -----------------------------


def test_alert_scenario_gpus_slow_down_then_trip_while_the_pumps_are_off() -> None:
    """A01/A02 (2 direct-liquid nodes of 8 H200, 34 kW budget) on CDU-1, A03 (immersion)
    on CDU-2, every rack at 85 % of its budget, CDU-1's pumps off at 15 s for 240 s: the
    GPUs slow down well before any trips, and GPUs of both racks trip with a minute of the
    failure left (the end-to-end test's updates need one group interval between them)."""
    model = pump_failure_site(liquid_budget_kw=34.0, outage_s=240)
    cooled = [g for rack in ("A01", "A02") for n in model.racks[rack].nodes for g in n.gpus]
    slowed_at = first_trip = None
    for t in range(15 + 240):
        model.step(1.0, float(t), wall=1_795_996_000.0 + t)
        if slowed_at is None and any(g.reasons & reasons.HW_THERMAL_SLOWDOWN for g in cooled):
            slowed_at = t - 15
        if first_trip is None and any(g.lost for g in cooled):
            first_trip = t - 15
    assert slowed_at is not None and first_trip is not None
    assert slowed_at + 30 <= first_trip <= 180  # the 30 s slowdown rule fires first
    for rack in ("A01", "A02"):
        assert any(g.lost for n in model.racks[rack].nodes for g in n.gpus), rack
    assert not any(g.lost for n in model.racks["A03"].nodes for g in n.gpus)
