"""Every sender declares its own cadence in every batch (docs/protocol.md, `cadence`): the
node agent its tick, the facility agent its targets' cadence, the simulator's virtual
nodes their tick and its site the device poll it really runs at."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agents.enroll import write_token
from agents.facility.collector import DeviceReading, TargetCollector
from agents.facility.config import Entity, Target
from agents.facility.poller import FacilityPoller
from agents.runconfig import AgentConfig, ConfigError, load_config
from agents.runner import CollectorSet, build_outbox, tick_interval
from fleetsim.faults import FaultPlan
from fleetsim.inventory import fetch_inventory
from fleetsim.runner import SimSettings, Simulator
from tests.support.nvml_scenarios import CAPTURE
from tests.support.stub_server import ENROLL_TOKEN, StubBackend
from tests.support.waiting import wait_until


def test_the_node_agent_declares_its_interval_in_every_batch(
    backend: StubBackend, tmp_path: Path
) -> None:
    source = "node:gpu-a01-01"
    write_token(tmp_path / "token", backend.enroll(source))
    argv = [
        *(sys.executable, "-m", "agents.cli", "run", "--server", backend.url),
        *("--token-file", str(tmp_path / "token"), "--source", source),
        *("--spool-dir", str(tmp_path / "spool"), "--interval-s", "0.2"),
        *("--nvml", f"fake:{CAPTURE}::2", "--collectors", "gpu"),
    ]
    agent = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: len(backend.store.batches) >= 3, 20, "three batches at the backend")
    finally:
        agent.send_signal(signal.SIGTERM)
        _, stderr = agent.communicate(timeout=30)
    assert agent.returncode == 0, stderr
    intervals = [(b["cadence"]["sample_s"], b["cadence"]["batch_s"]) for b in backend.store.batches]
    assert intervals == [(0.2, 0.2)] * len(intervals)


def test_the_node_agent_declares_its_slow_reads_with_their_own_interval(
    backend: StubBackend, tmp_path: Path
) -> None:
    """Energy read every 5 ticks of 0.2 s: `energy_j` comes every second, which the
    server must not judge as a field that stopped (docs/protocol.md, `fields_s`)."""
    source = "node:gpu-a01-01"
    write_token(tmp_path / "token", backend.enroll(source))
    argv = [
        *(sys.executable, "-m", "agents.cli", "run", "--server", backend.url),
        *("--token-file", str(tmp_path / "token"), "--source", source),
        *("--spool-dir", str(tmp_path / "spool"), "--interval-s", "0.2"),
        *("--nvml", f"fake:{CAPTURE}::2", "--collectors", "gpu", "--energy-every", "5"),
    ]
    agent = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def declared() -> dict[str, float]:
        return dict(backend.store.batches[-1]["cadence"].get("fields_s", {}))

    try:
        wait_until(
            lambda: bool(backend.store.batches) and "energy_j" in declared(),
            20,
            "energy_j declared at its own interval",
        )
    finally:
        agent.send_signal(signal.SIGTERM)
        _, stderr = agent.communicate(timeout=30)
    assert agent.returncode == 0, stderr
    assert declared()["energy_j"] == pytest.approx(1.0)
    assert "temp_gpu_c" not in declared()  # read every tick
    assert declared()["pcie_tx_kib_s"] == pytest.approx(60.0)  # every 300 ticks by default


class _Target:
    """A facility collector as the runner sees it: only its cadence matters here."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s


def test_a_facility_agent_declares_its_shortest_target_cadence(tmp_path: Path) -> None:
    config = AgentConfig(server="http://127.0.0.1:9", source="site:lab", spool_dir=tmp_path)
    targets = [_Target(5.0), _Target(30.0)]
    config.interval_s = tick_interval(config, targets)  # type: ignore[arg-type]
    outbox = build_outbox(config, "fws_token")
    assert outbox.cadence == {"sample_s": 5.0, "batch_s": 5.0}


async def test_the_simulator_declares_each_source_at_its_real_cadence(
    backend: StubBackend, tmp_path: Path
) -> None:
    inventory = fetch_inventory(backend.url, ENROLL_TOKEN).first_nodes(1)
    settings = SimSettings(
        backend.url, ENROLL_TOKEN, tmp_path, interval_s=0.1, facility_interval_s=0.3
    )
    await Simulator(settings, inventory, FaultPlan()).run(duration_s=1.0)
    declared = {b["source"]: b["cadence"] for b in backend.store.batches}
    assert declared == {
        "node:gpu-a01-01": {"sample_s": 0.1, "batch_s": 0.1},
        "site:lab": {"sample_s": 0.3, "batch_s": 0.3},
    }
    assert all("cadence" in b for b in backend.store.batches)


@pytest.mark.parametrize("interval", ["0", "0.001", "7200"])
def test_an_interval_the_server_would_refuse_stops_the_agent_before_it_starts(
    interval: str,
) -> None:
    with pytest.raises(ConfigError, match=r"interval_s must be between 0\.01 and 3600"):
        load_config(None, {"FLEET_AGENT_INTERVAL_S": interval}, {})


class _FakeDevice(TargetCollector):
    """A facility target answering fixed values, without a network."""

    protocol = "fake"

    def __init__(self, name: str, feeds: Entity, interval_s: float, values: dict[str, float]):
        super().__init__(Target(name, "fake", "-", "-", feeds, interval_s))
        self.values = values

    def read(self) -> DeviceReading:
        return DeviceReading(dict(self.values))


def test_a_facility_agent_declares_the_fields_of_its_slower_targets() -> None:
    """A CDU polled every tick (1 s) and a PDU feed every 30 s: the feed's fields come every
    30 s and are declared so; the CDU's are not slow."""
    cdu = _FakeDevice("cdu", Entity("loop", "CDU-1"), 1.0, {"supply_c": 30.0, "flow_lpm": 400})
    pdu = _FakeDevice("pdu", Entity("feed", "A01", "A"), 30.0, {"current_a": 12.0})
    poller = FacilityPoller([cdu, pdu], workers=2)
    collectors = CollectorSet([poller], 1.0)  # type: ignore[list-item]
    try:
        collectors.collect(1_795_996_000.0, 0)
        assert collectors.fields_version == 1
        assert collectors.fields_s() == {"current_a": 30.0}
        collectors.collect(1_795_996_001.0, 1)
        assert collectors.fields_version == 1  # unchanged: declared once
    finally:
        collectors.close()
