"""The simulator's GPUs at their own limits: SW thermal slowdown, HW slowdown that holds the
die near its slowdown threshold, and the thermal trip that takes a GPU off the bus (XID 79,
`gpu_lost`), as a real GPU and the real agent report them."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

from agents.nvml.events import XID_MEANING
from agents.nvml.wrapper import GpuLost
from agents.protocol import reasons
from fleetsim.faults import FaultPlan, parse_fault
from fleetsim.fleet import SiteModel
from fleetsim.inventory import parse_inventory
from fleetsim.physics import H100, H200, MAX_SM_MHZ, GpuModel, GpuSpec, spec_for
from fleetsim.plant import THERMAL_RESET_AFTER_S
from tests.support.sim_scenarios import pump_failure_site
from tests.support.stub_server import SMALL_SITE

CAPTURE = Path(__file__).resolve().parents[1] / "data" / "nvml" / "h200" / "nvml_inventory.json"
MIB = 1024 * 1024


def _gpu(spec: GpuSpec = H200) -> GpuModel:
    return GpuModel(index=0, cooling="direct_liquid", rng=random.Random(7), spec=spec)


def _hold(gpu: GpuModel, coolant_c: float, seconds: int, load: float = 1.0) -> list[float]:
    """Run the GPU at `load` on coolant held at `coolant_c`; the die temperature each second."""
    dies = []
    for _ in range(seconds):
        gpu.step(1.0, load, coolant_c)
        dies.append(gpu.temp_die_c)
    return dies


def _site(faults: list[str]) -> SiteModel:
    model = SiteModel(parse_inventory(SMALL_SITE), FaultPlan([parse_fault(f) for f in faults]), 1)
    for node in model.nodes.values():
        node.workload.kind, node.workload.load, node.workload.remaining_s = "training", 1.0, 1e9
    return model


def _run(model: SiteModel, seconds: int, start: int = 0) -> None:
    for t in range(start, start + seconds):
        model.step(1.0, float(t), wall=1_795_996_000.0 + t)


# -- limits per model ---------------------------------------------------------------------


def test_h200_limits_and_memory_are_the_captures() -> None:
    device = json.loads(CAPTURE.read_text())["devices"][0]
    assert H200.mem_total_mib == device["memory_info"]["total"] / MIB  # 143771 MiB, "141 GB"
    assert H200.slowdown_c == device["temp_threshold_slowdown"]
    assert H200.shutdown_c == device["temp_threshold_shutdown"]
    assert H200.gpu_max_c == device["temp_threshold_gpu_max"]
    assert H200.mem_max_c == device["temp_threshold_mem_max"]
    assert H200.power_cap_w == device["power_limit_default_mw"] / 1000


def test_each_gpu_describes_its_own_model_memory_and_limits() -> None:
    data = json.loads(json.dumps(SMALL_SITE))
    data["nodes"][2]["gpus"] = [{"index": i, "model": "NVIDIA H100 80GB HBM3"} for i in range(4)]
    model = SiteModel(parse_inventory(data), FaultPlan(), seed=1)
    h100 = model.node_reading("gpu-b01-01", time.time(), with_info=True)
    h200 = model.node_reading("gpu-a01-01", time.time(), with_info=True)
    assert {i["mem_total_mib"] for i in h100.gpu_info} == {81559.0}  # an 80 GB H100
    assert {i["limits"]["shutdown_c"] for i in h100.gpu_info} == {92.0}
    assert {s["mem_total_mib"] for s in h100.samples["gpu"]} == {81559.0}
    assert {i["mem_total_mib"] for i in h200.gpu_info} == {143771.0}
    assert {i["limits"]["shutdown_c"] for i in h200.gpu_info} == {95.0}
    assert spec_for("HGX H100 8-GPU") is H100 and spec_for("NVIDIA H200") is H200


# -- holding at the limits ----------------------------------------------------------------


def test_sw_thermal_slowdown_holds_a_hot_gpu_at_its_max_operating_temperature() -> None:
    gpu = _gpu()
    dies = _hold(gpu, coolant_c=70.0, seconds=600)  # full load would settle near 108 °C
    assert max(dies) <= H200.gpu_max_c + 0.5
    assert abs(gpu.temp_die_c - H200.gpu_max_c) < 0.5
    assert gpu.reasons & reasons.SW_THERMAL_SLOWDOWN
    assert not gpu.reasons & reasons.HW_SLOWDOWN
    assert gpu.power_avg_w < 400 and gpu.clock_sm_mhz < 1000  # visibly throttled


def test_hw_slowdown_settles_near_the_slowdown_limit_without_running_away() -> None:
    gpu = _gpu()
    _hold(gpu, coolant_c=30.0, seconds=120)  # a normal run at the power cap
    dies = _hold(gpu, coolant_c=81.5, seconds=600)  # water this hot: only HW slowdown helps
    assert gpu.reasons & reasons.HW_SLOWDOWN and gpu.reasons & reasons.HW_THERMAL_SLOWDOWN
    assert abs(gpu.temp_die_c - H200.slowdown_c) <= 1.0
    assert max(dies) <= H200.slowdown_c + 1.0
    assert gpu.clock_sm_mhz <= MAX_SM_MHZ / 2  # "clocks at least halved"
    assert gpu.power_avg_w < 100
    assert not gpu.lost
    # The water is cold again: the GPU speeds up as its heatsink cools, never overshooting.
    recovery = _hold(gpu, coolant_c=30.0, seconds=300)
    assert max(recovery) <= H200.slowdown_c + 1.0
    assert not gpu.reasons & reasons.HARMFUL
    assert gpu.power_avg_w > 650 and gpu.clock_sm_mhz > 1400


# -- past the limit: off the bus ----------------------------------------------------------


def test_a_gpu_reaching_its_shutdown_limit_trips_off_the_bus() -> None:
    gpu = _gpu()
    tripped = [gpu.step(1.0, 1.0, 89.0) for _ in range(300)]  # even idle power: 97 °C
    assert tripped.count(True) == 1  # one trip, reported once
    assert gpu.lost and gpu.tripped and gpu.power_avg_w == 0.0
    assert gpu.temp_die_c <= H200.shutdown_c + 1.0


def test_an_h100_trips_at_its_own_lower_shutdown_limit() -> None:
    h100, h200 = _gpu(H100), _gpu(H200)
    _hold(h100, coolant_c=86.0, seconds=600)  # the die settles near 94 °C
    _hold(h200, coolant_c=86.0, seconds=600)
    assert h100.lost  # 92 °C
    assert not h200.lost and h200.reasons & reasons.HW_SLOWDOWN  # 95 °C


def test_pumps_stopped_for_good_take_the_gpus_off_the_bus_as_an_agent_reports_it() -> None:
    model = _site(["cdu-pump-fail:CDU-1@60"])
    _run(model, 60)
    node = model.nodes["gpu-a01-01"]
    before = model.racks["A01"].power_w
    events: list[dict[str, Any]] = []
    for t in range(60, 960):
        _run(model, 1, start=t)
        events += model.node_reading(node.name, time.time(), with_info=False).events
        if all(g.lost for g in node.gpus):
            break
    assert all(g.lost for g in node.gpus), "the stagnant water never reached the shutdown limit"
    xids = [e for e in events if e["kind"] == "xid"]
    lost = [e for e in events if e["kind"] == "gpu_lost"]
    assert sorted(e["gpu"] for e in xids) == sorted(e["gpu"] for e in lost) == list(range(8))
    assert {e["code"] for e in xids} == {79}
    assert {e["detail"] for e in xids} == {XID_MEANING[79]}  # the agent's words for XID 79
    assert lost[0]["detail"] == str(GpuLost(lost[0]["gpu"], "utilization"))  # as the agent
    reading = model.node_reading(node.name, time.time(), with_info=True)
    assert "gpu" not in reading.samples  # a lost GPU sends nothing
    assert reading.gpu_info == []  # and is not described
    assert model.racks["A01"].power_w < before / 2
    air = model.nodes["gpu-b01-01"]
    assert not any(g.lost for g in air.gpus)  # its rack is not on that loop


def test_a_tripped_gpu_comes_back_after_a_reset_once_cool() -> None:
    model = _site(["cdu-pump-fail:CDU-1@0+15m"])
    _run(model, 900)
    node = model.nodes["gpu-a01-01"]
    assert all(g.lost for g in node.gpus)
    _run(model, int(THERMAL_RESET_AFTER_S), start=900)
    reading = model.node_reading(node.name, time.time(), with_info=False)
    assert {s["gpu"] for s in reading.samples["gpu"]} == set(range(8))
    assert not any(g.lost for g in node.gpus)


def test_a_power_cycle_clears_a_thermal_trip() -> None:
    model = _site(["cdu-pump-fail:CDU-1@0", "node-offline:gpu-a01-01@900+30"])
    _run(model, 940)
    assert not any(g.lost for g in model.nodes["gpu-a01-01"].gpus)
    assert all(g.lost for g in model.nodes["gpu-a01-02"].gpus)  # not power-cycled: still off


# -- a short failure on big racks: slowdown without a trip ----------------------------
# (the end-to-end scenario's own premise, with trips, is in tests/agents/test_sim_reset.py)


def _alert_scenario() -> SiteModel:
    """130 kW racks, CDU-1's pumps off at 15 s for 150 s (tests/support/sim_scenarios.py)."""
    return pump_failure_site(liquid_budget_kw=130.0, outage_s=150)


def test_alert_scenario_gpus_slow_down_while_pumps_are_off_but_stay_on_the_bus() -> None:
    model = _alert_scenario()
    gpus = [g for n in model.racks["A01"].nodes + model.racks["A02"].nodes for g in n.gpus]
    throttled_at = None
    hottest = 0.0
    for t in range(15 + 150 + 120):
        model.step(1.0, float(t), wall=1_795_996_000.0 + t)
        if throttled_at is None and all(g.reasons & reasons.HARMFUL for g in gpus):
            throttled_at = t - 15
        hottest = max(hottest, *(g.temp_die_c for g in gpus))
    # Thermal bits within ~70 s, a GPU thermal rule firing well before the pumps restart,
    # and nothing lost: 130 kW racks hold enough water to ride out 150 s.
    assert throttled_at is not None and 50 <= throttled_at <= 90
    assert not any(g.lost for g in gpus)
    assert hottest < H200.shutdown_c - 2
    assert not any(g.reasons & reasons.HARMFUL for g in gpus)  # recovered 2 min after
