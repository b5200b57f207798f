"""Benchmark: what the node agent costs on an 8-GPU H200 node, on a machine without GPUs.

A fake NVML answers from the real H200 capture (tests/data/nvml/h200/) and spends each
call's measured cost from nvml_call_costs.json: it burns CPU for the measured CPU time and
waits for the rest of the wall time. The agent runs as in production: GPU, host and tuning
collectors on the tiered schedule, fsync'd spool, WebSocket uplink to a sink in another
process (so the server's work is not counted), 1 Hz.

    .venv/bin/python bench/agent.py [--seconds 120] [--gpus 8]

Last line: cpu_pct_of_core=X rss_mb=X nvml_ms_per_gpu_tick=X ticks_skipped=N
(targets: cpu ≤ 1 % of a core, RSS ≤ 40 MB, NVML ≤ 1 ms per GPU per tick).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CAPTURE = ROOT / "tests" / "data" / "nvml" / "h200"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _sink(port: int) -> None:
    """A WebSocket server that acks every batch: the backend, minus its cost."""
    from websockets.asyncio.server import ServerConnection, serve

    async def handler(connection: ServerConnection) -> None:
        async for frame in connection:
            seq = json.loads(frame)["seq"]
            await connection.send(json.dumps({"ack": seq}))

    async def main() -> None:
        async with serve(handler, "127.0.0.1", port, compression=None):
            await asyncio.Future()

    asyncio.run(main())


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


async def _run(seconds: float, gpus: int, url: str, spool: Path) -> dict[str, float]:
    from agents.collectors.gpu import GpuCollector
    from agents.collectors.host import HostCollector
    from agents.collectors.tuning import TuningCollector
    from agents.nvml.wrapper import Nvml
    from agents.runconfig import AgentConfig
    from agents.runner import AgentRunner, CollectorSet, build_outbox
    from fleetsim.fake_nvml import FakeNvml

    fake = FakeNvml(CAPTURE, gpus=gpus, spend_costs=True)
    config = AgentConfig(server=url, source="node:bench", spool_dir=spool, interval_s=1.0)
    collectors = CollectorSet(
        [GpuCollector(Nvml(fake)), HostCollector(), TuningCollector()], config.interval_s
    )
    runner = AgentRunner(config, collectors, build_outbox(config, "fwn_bench"))
    loop = asyncio.get_running_loop()
    # Measure the steady state: from the first tick after start-up to the end.
    cpu_start = time.process_time()
    wall_start = time.monotonic()
    loop.call_later(seconds, runner.stop)
    await runner.run()
    wall = time.monotonic() - wall_start
    cpu = time.process_time() - cpu_start
    ticks = max(1, runner.ticks)
    return {
        "cpu_pct_of_core": 100.0 * cpu / wall,
        "rss_mb": _rss_mb(),
        "nvml_ms_per_gpu_tick": fake.stats.wall_s * 1000.0 / (gpus * ticks),
        "ticks_skipped": runner.ticker.skipped,
        "ticks": runner.ticks,
        "acked": runner.outbox.uplink.stats.acked,
        "nvml_calls": fake.stats.calls,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()
    port = _free_port()
    sink = multiprocessing.get_context("spawn").Process(target=_sink, args=(port,), daemon=True)
    sink.start()
    time.sleep(1.0)
    try:
        with tempfile.TemporaryDirectory() as spool:
            result = asyncio.run(
                _run(args.seconds, args.gpus, f"http://127.0.0.1:{port}", Path(spool))
            )
    finally:
        sink.terminate()
    print(
        f"machine: {os.cpu_count()} CPUs, python {sys.version.split()[0]}; "
        f"{args.gpus} fake H200s, {result['ticks']} ticks, {result['acked']} batches acked, "
        f"{result['nvml_calls']} NVML calls"
    )
    print(
        f"cpu_pct_of_core={result['cpu_pct_of_core']:.2f} rss_mb={result['rss_mb']:.1f} "
        f"nvml_ms_per_gpu_tick={result['nvml_ms_per_gpu_tick']:.3f} "
        f"ticks_skipped={int(result['ticks_skipped'])}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
