"""The simulator's InfiniBand ports (fleetsim/fabric.py): each virtual node's fake sysfs tree,
read by the agent's real fabric collector — one NDR port per GPU, counters that advance as a
sound link's do, and the `ib-*` faults that make a port flap, raise symbol errors or go
down."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agents.protocol.fabric import check_fabric
from fleetsim.fabric import SimFabric
from fleetsim.faults import FaultPlan, FaultSpecError, parse_fault
from fleetsim.fleet import SiteModel
from fleetsim.inventory import fetch_inventory, parse_inventory
from fleetsim.runner import SimSettings, Simulator
from tests.support.stub_server import ENROLL_TOKEN, SMALL_SITE, StubBackend

READ_S = 10.0
T0 = 1_795_996_000.0


def fabric(tmp_path: Path, *faults: str) -> SimFabric:
    plan = FaultPlan([parse_fault(f) for f in faults])
    return SimFabric(SiteModel(parse_inventory(SMALL_SITE), plan, seed=1), tmp_path / "sysfs")


def reads(sim: SimFabric, node: str, seconds: float) -> list[dict[tuple[str, int], Any]]:
    """Each read of `node` every 10 s over `seconds` of simulated time, by (device, port)."""
    out = []
    for i in range(int(seconds / READ_S) + 1):
        entries = sim.read(node, T0 + i * READ_S, i * READ_S).fabric
        out.append({(e["device"], e["port"]): e for e in entries})
    return out


def _refuse(where: str, why: str) -> Exception:
    return ValueError(f"{where}: {why}")


def test_each_gpu_has_an_active_ndr_port_the_servers_validator_accepts(tmp_path: Path) -> None:
    sim = fabric(tmp_path)
    [first] = reads(sim, "gpu-a01-01", 0)
    assert sorted(first) == [(f"mlx5_{i}", 1) for i in range(8)]
    assert len(reads(sim, "gpu-b01-01", 0)[0]) == 4  # a node of four GPUs: four HCAs
    port = first[("mlx5_0", 1)]
    assert (port["state"], port["phys_state"], port["rate"], port["link_layer"]) == (
        "ACTIVE",
        "LinkUp",
        "400 Gb/sec (4X NDR)",
        "InfiniBand",
    )
    check_fabric(list(first.values()), "node", lambda v, w: float(v), _refuse)


def test_a_healthy_port_stays_far_under_the_error_rates_the_rules_judge(tmp_path: Path) -> None:
    hour = reads(fabric(tmp_path), "gpu-a01-01", 3600)
    last = hour[-1]
    for key, port in last.items():
        assert port["state"] == "ACTIVE", key
        assert port["counters"]["symbol_error"] <= 10, key  # the rules judge 120 an hour
        assert port["counters"]["link_downed"] == 0, key


def test_a_flapping_port_counts_each_flap_and_is_seen_down_then_back(tmp_path: Path) -> None:
    sim = fabric(tmp_path, "ib-port-flap:gpu-a01-01/3@30s+2m,every=60")
    seen = reads(sim, "gpu-a01-01", 240)
    flapping = [r[("mlx5_3", 1)] for r in seen]
    downed = [p["counters"]["link_downed"] for p in flapping]
    assert downed[0] == 0 and downed[-1] == 2  # at 30 s and 90 s, then the fault ended
    assert [p["state"] for p in flapping[3:6]] == ["DOWN", "ACTIVE", "ACTIVE"]
    assert all(r[("mlx5_2", 1)]["counters"]["link_downed"] == 0 for r in seen)  # only mlx5_3


def test_symbol_errors_rise_at_the_faults_rate(tmp_path: Path) -> None:
    sim = fabric(tmp_path, "ib-symbol-errors:gpu-a01-01,rate=3600")
    ten_minutes = reads(sim, "gpu-a01-01", 600)
    port = ten_minutes[-1][("mlx5_0", 1)]  # a NODE target is its first HCA
    assert 595 <= port["counters"]["symbol_error"] <= 610  # one a second
    assert 55 <= port["counters"]["port_rcv_errors"] <= 65
    assert ten_minutes[-1][("mlx5_1", 1)]["counters"]["symbol_error"] <= 2


def test_a_port_down_fault_holds_it_down_with_one_link_downed(tmp_path: Path) -> None:
    sim = fabric(tmp_path, "ib-port-down:gpu-a01-01/7@20s+1m")
    port = [r[("mlx5_7", 1)] for r in reads(sim, "gpu-a01-01", 120)]
    assert [p["state"] for p in port] == ["ACTIVE"] * 2 + ["DOWN"] * 6 + ["ACTIVE"] * 5
    assert port[-1]["counters"]["link_downed"] == 1


def test_an_hca_that_is_not_a_number_is_explained() -> None:
    with pytest.raises(FaultSpecError, match="one HCA by number"):
        parse_fault("ib-port-flap:gpu-a01-01/mlx5_3")


async def test_the_simulators_nodes_send_their_ports(backend: StubBackend, tmp_path: Path) -> None:
    inventory = fetch_inventory(backend.url, ENROLL_TOKEN).first_nodes(2)
    settings = SimSettings(backend.url, ENROLL_TOKEN, tmp_path, interval_s=0.1)
    await Simulator(settings, inventory, FaultPlan()).run(duration_s=0.5)
    ports = {
        (b["source"], e["device"])
        for b in backend.store.batches
        if b["source"].startswith("node:")
        for e in b.get("fabric", ())
    }
    assert ports == {(f"node:gpu-a01-0{n}", f"mlx5_{i}") for n in (1, 2) for i in range(8)}
    assert (tmp_path / "sysfs" / "gpu-a01-01" / "class" / "infiniband" / "mlx5_7").is_dir()
