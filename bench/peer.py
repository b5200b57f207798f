"""Fleetwatch against Prometheus side by side on this machine (issue 23, part 1):
`.venv/bin/python bench/peer.py [--gpus 1000] [--minutes 9] [--warmup-s 15] [--side both]`.

The same N GPUs at 1 Hz on both sides, the same 15 fields carrying the same value stream:
the H200 capture replayed per GPU with per-GPU offsets (bench/peer_stream.py lists the
fields and their dcgm-exporter names). One side after the other, the same N and duration:

1. Prometheus (Debian's /usr/bin/prometheus) scraping one dcgm-exporter-shaped target per
   node of 8 GPUs every second, blocks forced to 5 minutes
   (`--storage.tsdb.min-block-duration=5m --storage.tsdb.max-block-duration=5m`) so that
   the head is compacted into blocks inside a run of 8 minutes or more (bench/peer_prom.py).
2. Fleetwatch as bench/scale.py runs it: two server processes behind nginx on PostgreSQL,
   the maintenance worker and a beat with the storage's upkeep only, every node on its own
   WebSocket (bench/peer_fleet.py); raw spans sealed and packed every 5 minutes, as
   Prometheus's blocks.

Per side: CPU of every process of the side per GPU sample (Prometheus; the server loops,
ingest children, PostgreSQL backends, nginx, worker, beat), and disk per GPU-hour of
everything the side keeps for the samples (Prometheus's blocks + WAL + chunks_head;
Fleetwatch's fw_* tables with partitions, TOAST and indexes, after its rollup ran), the
bytes over the GPU samples stored × 3,600. The load generators (exporter, agents) are
measured and shown, not counted. Last line:

  gpus=N fw_us_per_gpu_sample=X prom_us_per_gpu_sample=X fw_bytes_per_gpu_hour=X
  prom_bytes_per_gpu_hour=X ack_p99_s=X
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.environment import use_bench_settings  # noqa: E402

use_bench_settings()

from bench.peer_fleet import FleetRun, Plan, run_fleetwatch, seal_like_prometheus  # noqa: E402
from bench.peer_prom import PromRun, run_prometheus  # noqa: E402
from bench.peer_stream import FIELDS  # noqa: E402
from bench.scale import bench_database, pg_value  # noqa: E402
from bench.scale_agents import GPUS_PER_NODE  # noqa: E402
from bench.scale_report import fmt, machine  # noqa: E402

LOAD_GROUPS = ("agents (load)",)  # measured, not counted against the side


def log(line: str) -> None:
    print(line, flush=True)


def per_gpu_hour(total_bytes: float, gpu_samples: int) -> float:
    """Bytes kept per GPU-hour at 1 Hz: bytes per GPU sample × 3,600."""
    if gpu_samples <= 0:
        raise ValueError("no GPU samples were stored: nothing to divide the bytes by")
    return total_bytes / gpu_samples * 3600


def us_per_sample(cpu_s: float, gpu_samples: int) -> float:
    if gpu_samples <= 0:
        raise ValueError("no GPU samples: nothing to divide the CPU by")
    return cpu_s / gpu_samples * 1e6


def report_prometheus(run: PromRun) -> dict[str, float]:
    us = us_per_sample(run.cpu_s, run.gpu_samples)
    kept = sum(run.disk[k] for k in ("blocks", "wal", "chunks_head"))
    per_hour = per_gpu_hour(kept, run.gpu_samples)
    log(
        f"prometheus: {run.seconds:.0f} s, {run.gpu_samples:,} GPU samples scraped,"
        f" {run.head_series:,.0f} head series, {run.compactions:g} compactions;"
        f" {run.appended:,.0f} samples appended"
        f" ({run.appended / max(run.gpu_samples, 1) / len(FIELDS):.3f} per GPU field served:"
        " 1 + 5 series per 8 GPUs of Prometheus's own, less any scrape that failed)"
    )
    log(f"  CPU: prometheus {run.cpu_s:.1f} s = {us:.1f} µs per GPU sample")
    log(
        f"  (load) exporter {run.exporter_cpu_s:.1f} s ="
        f" {us_per_sample(run.exporter_cpu_s, run.gpu_samples):.1f} µs per GPU sample"
    )
    parts = ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in run.disk.items())
    log(f"  disk: {parts} (other: lock and queries.active, not counted)")
    log(f"  kept: {kept / 1e6:.2f} MB = {per_hour / 1e3:,.1f} kB per GPU-hour")
    if run.block_hours > 0:
        gpus = run.gpu_samples / max(run.seconds, 1e-9)  # GPU samples a second ≈ GPUs
        blocks = run.disk["blocks"] / (run.block_hours * gpus)
        log(
            f"  blocks alone: {run.disk['blocks'] / 1e6:.2f} MB over {run.block_hours * 60:.1f}"
            f" min of data = {blocks / 1e3:,.1f} kB per GPU-hour (compacted)"
        )
    return {"us": us, "bytes": per_hour}


def report_fleetwatch(run: FleetRun) -> dict[str, float]:
    samples = run.gpu_samples
    a = run.agents
    log(
        f"fleetwatch: {run.window_s:.0f} s window, {a['acked']:,} of {a['sent']:,} batches"
        f" acked ({samples:,} GPU samples), nacks {a['nacks'] or 0} {a['nack_samples'][:2]},"
        f" lost {a['lost']},"
        f" sockets closed {a['closed']}"
    )
    log(
        f"  send → ack p50 {fmt(a['ack_p50_s'])} / p99 {fmt(a['ack_p99_s'])} / max"
        f" {fmt(a['ack_max_s'])} s; longest stretch with no ack {fmt(a['max_ack_gap_s'])} s"
    )
    counted = {k: v for k, v in run.cpu.items() if k not in LOAD_GROUPS}
    us = us_per_sample(sum(counted.values()), samples)
    per_hour = per_gpu_hour(run.total_bytes, run.gpu_rows)
    for who, spent in run.cpu.items():
        note = " (load generator, not counted)" if who in LOAD_GROUPS else ""
        us_each = us_per_sample(spent, samples)
        log(f"  CPU: {who} {spent:.1f} s = {us_each:.1f} µs per GPU sample{note}")
    log(
        f"  the machine was busy {run.machine_busy_s / run.window_s:.2f} of {os.cpu_count()}"
        f" cores; this side {sum(run.cpu.values()) / run.window_s:.2f} (agents included)"
    )
    for table, size in sorted(run.grown.items()):
        if not size:
            continue
        kb = per_gpu_hour(size, run.gpu_rows) / 1e3
        log(f"  disk: {table} {size / 1e6:.2f} MB = {kb:,.1f} kB per GPU-hour")
    log(
        f"  kept: {run.total_bytes / 1e6:.2f} MB grown over the run (the empty tables'"
        f" {sum(run.empty_bytes.values()) / 1e6:.2f} MB not counted),"
        f" {run.gpu_rows:,} GPU samples stored = {per_hour / 1e3:,.1f} kB per GPU-hour"
    )
    if run.wal_bytes:
        wal_kb = per_gpu_hour(run.wal_bytes, samples) / 1e3
        log(
            f"  PostgreSQL WAL written in the window: {run.wal_bytes / 1e6:.1f} MB ="
            f" {wal_kb:,.1f} kB per GPU-hour (the server's, recycled at checkpoints: not counted;"
            " its WAL is shared with other databases, Prometheus's is its own and counted)"
        )
    rollups = run.rollup_log.count("task fleet.rollup done in")
    log(f"  rollup ticks done: {rollups}")
    return {"us": us, "bytes": per_hour, "ack_p99_s": float(a["ack_p99_s"] or "nan")}


def fleetwatch_side(var_dir: Path, plan: Plan) -> dict[str, float]:
    var_dir.mkdir()
    seal_like_prometheus()
    with bench_database(var_dir) as bench:
        log(f"  PostgreSQL {pg_value(bench, 'SHOW server_version')}, database {bench.pg_name}")
        return report_fleetwatch(run_fleetwatch(bench, plan, log))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, default=1000, help="a multiple of 8 is kept")
    parser.add_argument(
        "--minutes",
        type=float,
        default=9,
        help="each side's run; Prometheus compacts its first 5-minute block once its head"
        " spans 7.5 minutes, so 8 or more shows a compaction",
    )
    parser.add_argument("--warmup-s", type=float, default=15)
    parser.add_argument(
        "--side",
        choices=("both", "prometheus", "fleetwatch"),
        default="both",
        help="one side alone (a check): no last line",
    )
    args = parser.parse_args()
    if args.gpus < GPUS_PER_NODE or args.minutes <= 0:
        parser.error("--gpus must be at least 8 and --minutes positive")
    log(f"machine: {machine()}")
    log(f"fields ({len(FIELDS)}): {', '.join(f'{f.metric}={f.dcgm}' for f in FIELDS)}")
    seconds = args.minutes * 60
    nodes = args.gpus // GPUS_PER_NODE
    origin = int(time.time())  # both sides' streams count their loops from here
    with tempfile.TemporaryDirectory(prefix="fw-bench-peer-") as tmp:
        prom = fw = None
        if args.side in ("both", "prometheus"):
            log(f"Prometheus side: {time.strftime('%H:%M:%S')}")
            ran = run_prometheus(Path(tmp) / "prom", nodes, seconds + args.warmup_s, origin, log)
            prom = report_prometheus(ran)
        if args.side in ("both", "fleetwatch"):
            log(f"Fleetwatch side: {time.strftime('%H:%M:%S')}")
            fw = fleetwatch_side(Path(tmp) / "fleet", Plan(nodes, seconds, args.warmup_s, origin))
    log(f"done: {time.strftime('%H:%M:%S')}")
    if prom is None or fw is None:
        return 0
    ahead_cpu = "Fleetwatch" if fw["us"] <= prom["us"] else "Prometheus"
    ahead_disk = "Fleetwatch" if fw["bytes"] <= prom["bytes"] else "Prometheus"
    log(
        f"ahead: CPU {ahead_cpu} ({fw['us'] / prom['us']:.2f}× Fleetwatch/Prometheus),"
        f" disk {ahead_disk} ({fw['bytes'] / prom['bytes']:.2f}×)"
    )
    log(
        f"gpus={nodes * GPUS_PER_NODE} fw_us_per_gpu_sample={fw['us']:.1f}"
        f" prom_us_per_gpu_sample={prom['us']:.1f} fw_bytes_per_gpu_hour={fw['bytes']:.0f}"
        f" prom_bytes_per_gpu_hour={prom['bytes']:.0f} ack_p99_s={fmt(fw['ack_p99_s'])}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
