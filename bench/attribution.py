"""Benchmark: what "who runs on each GPU" costs the node agent, on a machine without GPUs.

The workloads collector reads 8 fake H200s with 4 processes each, every process's owner (and
start) from a `/proc` tree of the recorded shapes (tests/data/proc/), exactly as on the slow
lane. The fake NVML answers from the H200 capture and spends, per process query, the cost in
bench/data/attribution_nvml_costs.json (CPU burnt, then a wait for the rest of the wall time);
the GPUs are under load (the capture's costlier phase). A read comes every 10 s, so its cost is
spread over the 10 one-second ticks of that cadence. The figure is wall time, which overstates:
the fake sleeps for each call's sub-microsecond wait, and a sleep lasts tens of microseconds
(`read_cpu_ms_mean` is the CPU the read burnt).

Then, unless `--agent-only`, the server's half of issue 21's figures:
- `ledger_query_s`: the efficiency page's queries over `--ledger-gpus` GPUs (10,000) × 30 days
  of hourly rows on PostgreSQL (DATABASE_URL; bench/ledger.py seeds and times them; target
  ≤ 1 s);
- `reconcile_error_pct`: the simulator's three hours of jobs through real agents into a real
  server (tests/support/ledger_truth.py), the ledger's jobs, pool and overhead against the
  facility meter (target ≤ 2 %), and the worst job against what its GPUs used.

    .venv/bin/python bench/attribution.py [--reads 200] [--gpus 8] [--procs 4]
        [--ledger-gpus 10000] [--agent-only]

Last line: gpus=8 procs_per_gpu=4 agent_attr_ms_per_gpu_tick=X (target ≤ 0.1)
ledger_gpus=… ledger_query_s=… reconcile_error_pct=… worst_job_error_pct=….
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CAPTURE = ROOT / "tests" / "data" / "nvml" / "h200"
SHAPES = ROOT / "tests" / "data" / "proc"
COSTS = ROOT / "bench" / "data" / "attribution_nvml_costs.json"
LOAD_T = 40.0  # seconds into the capture's trace: under load
EVERY_S = 10.0  # the collector's default cadence (workloads_s)
TICK_S = 1.0


def _proc_tree(root: Path, pids: list[int]) -> None:
    """`pids` under `root`, each with the cgroup and status of one recorded shape in turn."""
    templates = sorted(
        p for shape in SHAPES.iterdir() if shape.is_dir() for p in shape.iterdir() if p.is_dir()
    )
    for n, pid in enumerate(pids):
        shutil.copytree(templates[n % len(templates)], root / str(pid), dirs_exist_ok=True)
        # Every process has a start (`stat`), read once while its PID stays listed.
        shutil.copy(SHAPES / "started" / "4113" / "stat", root / str(pid) / "stat")
    shutil.copy(SHAPES / "started" / "stat", root / "stat")  # the host's boot time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--ledger-gpus", type=int, default=10_000)
    parser.add_argument("--agent-only", action="store_true")
    args = parser.parse_args()

    from agents.attribution.cgroups import ProcReader
    from agents.collectors.workloads import WorkloadCollector
    from agents.nvml.wrapper import Nvml
    from fleetsim.fake_nvml import FakeNvml
    from fleetsim.nvml_answers import FakeProcess

    processes: dict[int | tuple[int, int], list[FakeProcess]] = {
        gpu: [FakeProcess(10_000 + gpu * 100 + k, 16_000, sm_pct=20) for k in range(args.procs)]
        for gpu in range(args.gpus)
    }
    fake = FakeNvml(
        CAPTURE, gpus=args.gpus, clock=lambda: LOAD_T, spend_costs=True, processes=processes
    )
    for phase, calls in json.loads(COSTS.read_text())["costs"].items():
        fake.costs[phase].update(calls)
    with tempfile.TemporaryDirectory(prefix="fleetwatch-proc-") as tmp:
        _proc_tree(Path(tmp), [p.pid for procs in processes.values() for p in procs])
        collector = WorkloadCollector(Nvml(fake), ProcReader(Path(tmp)), TICK_S, EVERY_S)
        collector.setup()
        collector.read(time.time())  # warm: the first read takes the driver's whole buffer
        took, cpu = [], []
        for _ in range(args.reads):
            started, started_cpu = time.perf_counter(), time.thread_time()
            reading = collector.read(time.time())
            took.append(time.perf_counter() - started)
            cpu.append(time.thread_time() - started_cpu)
        collector.close()
    found = sum(len(entry["processes"]) for entry in reading.workloads)
    assert found == args.gpus * args.procs, f"attributed {found} processes"
    read_ms = statistics.mean(took) * 1000
    per_gpu_tick = read_ms / args.gpus / (EVERY_S / TICK_S)
    print(
        f"read_ms_mean={read_ms:.3f} read_ms_median={statistics.median(took) * 1000:.3f} "
        f"read_ms_max={max(took) * 1000:.3f} read_cpu_ms_mean={statistics.mean(cpu) * 1000:.3f} "
        f"every_s={EVERY_S:g}"
    )
    line = (
        f"gpus={args.gpus} procs_per_gpu={args.procs} agent_attr_ms_per_gpu_tick={per_gpu_tick:.4f}"
    )
    if not args.agent_only:
        line += " " + server_figures(args.ledger_gpus)
    print(line)


def server_figures(ledger_gpus: int) -> str:
    """The page's query time over 30 days (PostgreSQL) and the simulator's reconciliation."""
    import os

    from bench import ledger as ledger_bench  # sets Django up for the bench's settings
    from tests.support.ledger_truth import simulated_comparison

    query = "n/a (no DATABASE_URL)"
    if os.environ.get("DATABASE_URL"):
        figures = ledger_bench.run("postgresql", ledger_gpus, 30.0, "1h", 3, computed=False)
        query = f"{figures.page_s:.3f}"
    with tempfile.TemporaryDirectory(prefix="fleetwatch-truth-") as tmp:
        comparison = simulated_comparison(Path(tmp))
    return (
        f"ledger_gpus={ledger_gpus} ledger_query_s={query}"
        f" reconcile_error_pct={comparison.reconcile_pct:.3f}"
        f" worst_job_error_pct={comparison.worst_job.error_pct:.3f}"
    )


if __name__ == "__main__":
    main()
