"""`fleet-agent check` and `run` configured with `[[facility.targets]]` (no backend here)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agents.cli import main
from fleetsim.peers.site import SitePeers
from tests.support.agent import start_agent
from tests.support.agent_builders import agent_toml


@pytest.fixture
async def site_peers() -> AsyncIterator[SitePeers]:
    """A CDU over Redfish (one pump failed), a PDU feed over SNMP, a utility meter over Modbus."""
    peers = await SitePeers(loops=["CDU-1"], feeds=[("A01", "A")], meters=("utility",)).start()
    peers.update_loop("CDU-1", supply_c=30.5, return_c=41.0, flow_lpm=390.0, pumps_failed=1)
    peers.update_feed(
        "A01", "A", power_w=12_000.0, energy_kwh=1234.5, current_a=17.4, voltage_v=230.0
    )
    peers.update_meter("utility", power_w=15_000.0, energy_kwh=98_765.0)
    yield peers
    await peers.stop()


async def _cli(*args: str) -> tuple[int, str]:
    # A process of its own: the peers answer on this test's event loop meanwhile.
    process = await start_agent(*args, log_level="error", stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode()


def _config(tmp_path: Path, targets: list[dict[str, Any]], source: str = "site:demo") -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(agent_toml({"source": source, "spool_dir": tmp_path / "spool"}, targets))
    return path


async def test_check_prints_what_each_facility_target_answers(
    site_peers: SitePeers, tmp_path: Path
) -> None:
    config = _config(tmp_path, site_peers.target_tables())

    code, out = await _cli("check", "--config", str(config))

    assert code == 0, out
    lines = {line.split()[1]: line for line in out.splitlines() if line.startswith("  ")}
    assert lines["cdu-CDU-1"].lstrip().startswith("DEGRADED")  # the CDU reports its failed pump
    assert "pumps_failed=1" in lines["cdu-CDU-1"] and "supply_c=30.5" in lines["cdu-CDU-1"]
    assert "redfish" in lines["cdu-CDU-1"]
    assert lines["pdu-A01-A"].lstrip().startswith("OK")
    assert "power_w=12000" in lines["pdu-A01-A"] and "[snmp:apc-rpdu2]" in lines["pdu-A01-A"]
    assert lines["meter-utility"].lstrip().startswith("OK")
    assert "power_w=15000" in lines["meter-utility"] and "modbus" in lines["meter-utility"]
    assert "PUE" in out and "rack A01: 12.0 kW" in out
    assert "[gpu]" not in out  # a facility agent has no GPUs to read


async def test_check_fails_when_a_facility_target_does_not_answer(
    site_peers: SitePeers, tmp_path: Path
) -> None:
    tables = site_peers.target_tables()
    await site_peers.meters["utility"].stop()  # the meter goes away

    code, out = await _cli("check", "--config", str(_config(tmp_path, tables)))

    assert code == 1
    assert "failing: meter-utility" in out
    meter = next(line for line in out.splitlines() if "meter-utility (" in line)
    assert "power_w=" not in meter


def test_a_bad_target_table_stops_the_agent_naming_target_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = {"name": "pdu-x", "protocol": "snmp", "address": "127.0.0.1", "feeds": "feed:A01/A"}

    (tmp_path / "token").write_text("fws_not-used\n")
    config = str(_config(tmp_path, [table]))

    code = main(
        ["run", "--config", config, "--server", "http://x", "--token-file", str(tmp_path / "token")]
    )

    assert code == 2
    assert "facility target 'pdu-x': `profile` is required" in capsys.readouterr().out


def test_facility_targets_on_a_node_source_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = {
        "name": "cdu-1",
        "protocol": "redfish",
        "address": "http://127.0.0.1:1",
        "profile": "cdu",
        "feeds": "loop:CDU-1",
    }
    config = _config(tmp_path, [table], source="node:gpu-a01-01")

    code = main(["check", "--config", str(config)])

    assert code == 2
    assert 'set source = "site:<site slug>"' in capsys.readouterr().out
