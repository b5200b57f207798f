"""Facility benchmark: `.venv/bin/python bench/facility.py [--cycles 3] [--interval 10]`.

One facility agent (the real `build_collectors` poller) polls 200 SNMP PDUs, 20 Redfish
CDUs and 4 Modbus meters every `--interval` seconds. The devices are simulated peers on
loopback in a second process (the same peers the demo uses: `SnmpAgent` speaking
APC rPDU2, live Redfish CDU trees, pymodbus meters), so the agent's CPU is measured
alone. Reports the wall time of each poll cycle and the agent process's CPU over the
whole run (busy and idle), as a percentage of one core. Last line:
`pdus=200 cdus=20 meters=4 cycle_s=X cpu_pct_of_core=X`. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


async def serve_peers(pdus: int, cdus: int, meters: int) -> None:
    """Child process: start the peers, print their addresses, run until stdin closes."""
    from fleetsim.peers.modbus_meter import ModbusMeter
    from fleetsim.peers.redfish_server import RedfishServer, live_cdu_tree
    from fleetsim.peers.snmp_agent import SnmpAgent

    agents = [await SnmpAgent("bench").start() for _ in range(pdus)]
    for n, agent in enumerate(agents):
        agent.set_apc_pdu(power_w=8000 + n, energy_kwh=1000 + n, current_a=35.0, voltage_v=230)
    servers = [RedfishServer(live_cdu_tree(f"CDU-{n}")).start() for n in range(cdus)]
    maps = ["eastron-sdm630", "schneider-pm5000"]
    meter_peers = [await ModbusMeter(maps[n % 2]).start() for n in range(meters)]
    for meter in meter_peers:
        meter.set(power_w=1_000_000, energy_kwh=5_000_000)
    addresses = {
        "pdus": [a.address for a in agents],
        "cdus": [s.url for s in servers],
        "meters": [[m.address, maps[n % 2]] for n, m in enumerate(meter_peers)],
    }
    print(json.dumps(addresses), flush=True)
    await asyncio.to_thread(sys.stdin.read)  # the parent closes stdin when done
    for server in servers:
        server.stop()


def target_tables(addresses: dict[str, Any], interval_s: float) -> list[dict[str, Any]]:
    tables: list[dict[str, Any]] = []
    for n, address in enumerate(addresses["pdus"]):
        rack, feed = f"R{n // 2:03d}", "AB"[n % 2]
        tables.append(
            {
                "name": f"pdu-{rack}-{feed}",
                "protocol": "snmp",
                "address": address,
                "community": "bench",
                "profile": "apc-rpdu2",
                "feeds": f"feed:{rack}/{feed}",
                "interval_s": interval_s,
            }
        )
    for n, url in enumerate(addresses["cdus"]):
        tables.append(
            {
                "name": f"cdu-{n}",
                "protocol": "redfish",
                "address": url,
                "profile": "cdu",
                "feeds": f"loop:CDU-{n}",
                "interval_s": interval_s,
            }
        )
    roles = ["utility", "utility", "ups_output", "ups_output"]
    for n, (address, register_map) in enumerate(addresses["meters"]):
        tables.append(
            {
                "name": f"meter-{n}",
                "protocol": "modbus",
                "address": address,
                "profile": register_map,
                "feeds": f"meter:{roles[n % 4]}",
                "interval_s": interval_s,
            }
        )
    return tables


def run_agent(addresses: dict[str, Any], cycles: int, interval_s: float) -> dict[str, float]:
    from agents.facility.poller import FacilityPoller
    from agents.facility.targets import build_collectors

    [poller] = build_collectors(target_tables(addresses, interval_s))
    assert isinstance(poller, FacilityPoller)
    poller.setup()
    warm_up = time.monotonic()
    poller.collect(time.time())  # warm-up: connections, engine, first answers
    failing = [t.target.name for t in poller.targets if t.status.state not in ("ok", "degraded")]
    if failing:
        raise SystemExit(f"targets failing on the warm-up cycle: {failing[:5]}")
    cycle_times: list[float] = []
    samples = 0
    next_tick = warm_up + interval_s
    time.sleep(max(0.0, next_tick - time.monotonic()))
    # Measured: `cycles` whole intervals, each a poll of every target and then idle.
    cpu_start, wall_start = time.process_time(), time.monotonic()
    for _ in range(cycles):
        started = time.monotonic()
        reading = poller.collect(time.time())
        cycle_times.append(time.monotonic() - started)
        samples += sum(len(rows) for rows in reading.samples.values())
        next_tick += interval_s
        time.sleep(max(0.0, next_tick - time.monotonic()))
    cpu_s, wall_s = time.process_time() - cpu_start, time.monotonic() - wall_start
    poller.close()
    return {
        "cycle_s_max": max(cycle_times),
        "cycle_s_mean": sum(cycle_times) / len(cycle_times),
        "cpu_pct_of_core": 100.0 * cpu_s / wall_s,
        "cpu_s_per_cycle": cpu_s / cycles,
        "samples_per_cycle": samples / cycles,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pdus", type=int, default=200)
    parser.add_argument("--cdus", type=int, default=20)
    parser.add_argument("--meters", type=int, default=4)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--serve-peers", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_peers:
        asyncio.run(serve_peers(args.pdus, args.cdus, args.meters))
        return
    child = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve-peers",
            f"--pdus={args.pdus}",
            f"--cdus={args.cdus}",
            f"--meters={args.meters}",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert child.stdout is not None
        addresses = json.loads(child.stdout.readline())
        figures = run_agent(addresses, args.cycles, args.interval)
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(timeout=30)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; peers in a separate process"
    )
    for key, value in figures.items():
        print(f"{key:>18}: {value:.3f}")
    print(
        f"pdus={args.pdus} cdus={args.cdus} meters={args.meters} "
        f"cycle_s={figures['cycle_s_max']:.3f} cpu_pct_of_core={figures['cpu_pct_of_core']:.2f}"
    )


if __name__ == "__main__":
    main()
