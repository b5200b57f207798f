"""The report of bench/scale.py: what one run measured, printed, and the figures of its
last line."""

from __future__ import annotations

import math
import os
import platform
import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import scale_history as history
from bench.scale_agents import GPU_FIELDS, GPUS_PER_NODE

TASK_LINE = re.compile(
    r"^\[?(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[,.]\d+.*?"
    r"task (fleet\.rollup|fleet\.retention|alerts\.evaluate) (done in|failed after) ([0-9.]+) s"
    r"(?:: (\{.*\}))?",
    re.M,
)


Tick = tuple[float, str, float, bool, bool]  # (when, task, seconds, done, did work)


@dataclass
class Run:
    agents: dict[str, Any]
    window_s: float
    ticks: list[Tick]
    cpu: dict[str, float]
    rss_mib: float
    wal_bytes: float
    load: list[float]
    pg_activity: Counter[str]
    pg_samples: int
    nginx_conf: str
    beat_started: float = 0.0
    notes: list[str] = field(default_factory=list)


def task_ticks(log: Path) -> list[Tick]:
    """The worker's task lines; a tick "did work" when its result names rows or partitions
    (a rollup tick that finds the next minute not complete yet returns {})."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return [
        (
            time.mktime(time.strptime(m[1], "%Y-%m-%d %H:%M:%S")),
            m[2],
            float(m[4]),
            m[3] == "done in",
            m[5] not in (None, "{}"),
        )
        for m in TASK_LINE.finditer(text)
    ]


def fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def machine() -> str:
    mem = Path("/proc/meminfo").read_text().split("\n")[0].split()[1]
    return (
        f"{platform.machine()}, nproc {os.cpu_count()}, {int(mem) / 1024**2:.1f} GiB RAM,"
        f" Python {platform.python_version()}, load average now {os.getloadavg()[0]:.2f}"
    )


def report(run: Run, sizes: list[history.TierSize], gpus: int, step: int) -> dict[str, float]:
    a = run.agents
    print()
    print(
        f"agents: {a['nodes']} nodes × {GPUS_PER_NODE} GPUs at 1 Hz through nginx"
        f" ({run.nginx_conf}), {run.window_s / 60:g} min window"
    )
    print(
        f"  batches sent {a['sent']:,}, acked {a['acked']:,}, nacks {a['nacks']},"
        f" unacked {a['unacked']:,} (lost with their connection {a['lost']:,}),"
        f" sockets closed {a['closed']}, ticks with no connection {a['skipped']:,}"
    )
    print(
        f"  throughput: {a['acked'] / run.window_s:,.0f} batches/s acked,"
        f" {a['sent'] / run.window_s:,.0f} sent"
    )
    for sample in a["nack_samples"][:3]:
        print(f"  nack: {sample}")
    print(
        f"  send → ack: p50 {fmt(a['ack_p50_s'])}  p90 {fmt(a['ack_p90_s'])}"
        f"  p99 {fmt(a['ack_p99_s'])}  p99.9 {fmt(a['ack_p999_s'])}  max {fmt(a['ack_max_s'])} s"
    )
    print(
        f"  longest stretch with no ack fleet-wide: {fmt(a['max_ack_gap_s'])} s, from"
        f" {time.strftime('%H:%M:%S', time.gmtime(a['max_ack_gap_at']))} UTC"
    )
    print(
        f"  load generator late to send: p99 {fmt(a['send_late_p99_s'])} s,"
        f" max {fmt(a['send_late_max_s'])} s"
    )
    worst = sorted(a["timeline"], key=lambda row: -row[2])[:5]
    print(
        "  worst seconds (UTC, acks, max s, p99 s): "
        + "; ".join(
            f"{time.strftime('%H:%M:%S', time.gmtime(r[0]))} {r[1]} {r[2]:.2f} {r[3]:.2f}"
            for r in worst
        )
    )
    rollups = [t for t in run.ticks if t[1] == "fleet.rollup"]
    passes = [t for t in run.ticks if t[1] == "fleet.retention"]
    evals = [t[2] for t in run.ticks if t[1] == "alerts.evaluate" and t[3]]
    print(f"worker: {len(rollups)} rollup ticks, {len(passes)} retention passes in the run")
    if evals:
        print(
            f"  alerts.evaluate (every 10 s, the alerts worker): {len(evals)} ticks, median"
            f" {statistics.median(evals):.3f} s, max {max(evals):.3f} s"
        )
    for when, task, took, done, worked in run.ticks:
        if task == "alerts.evaluate":
            continue
        status = ("" if worked else " (nothing to do)") if done else " FAILED"
        since = when - run.beat_started
        print(
            f"  {time.strftime('%H:%M:%S', time.gmtime(when))} (+{since:4.0f} s) {task}"
            f" {took:.3f} s{status}"
        )
    # The beat ticks every 30 s and a minute completes every 60 s, so about every other
    # tick finds nothing to do: the figure is the ticks that computed a minute.
    rollup_s = [t[2] for t in rollups if t[3] and t[4]]
    idle_s = [t[2] for t in rollups if t[3] and not t[4]]
    if idle_s:
        print(
            f"  rollup ticks with nothing to do: {len(idle_s)}, median"
            f" {statistics.median(idle_s):.3f} s (not in rollup_tick_s)"
        )
    retention_s = [t[2] for t in passes if t[3]]
    samples = a["acked"] * GPUS_PER_NODE
    print("CPU over the window (s; per GPU sample acked):")
    for who, spent in run.cpu.items():
        per = spent / samples * 1e6 if samples else math.nan
        print(f"  {who:15s} {spent:8.1f} s  {per:6.1f} µs per GPU sample")
    server_s = run.cpu["server loops"] + run.cpu["ingest children"]
    server = server_s / samples * 1e6 if samples else math.nan
    print(
        f"  server (uvicorn + ingest children): {server:.1f} µs per GPU sample of"
        f" {len(GPU_FIELDS)} fields = {server / len(GPU_FIELDS):.2f} µs per value;"
        f" {server * gpus / 1e6:.2f} cores for {gpus} GPUs at 1 Hz"
    )
    print(
        f"  server memory (RSS, uvicorn + children): {run.rss_mib:.0f} MiB"
        f" = {run.rss_mib / gpus * 1000:.0f} MiB per 1,000 GPUs"
    )
    print(f"  load average during the window: {', '.join(f'{x:.1f}' for x in run.load)}")
    busy = sum(run.cpu.values()) / run.window_s
    print(
        f"  the machine was busy {busy:.2f} of {os.cpu_count()} cores on average;"
        f" {run.cpu['everything else'] / run.window_s:.2f} of them not this bench"
        " (other work, PostgreSQL's own background processes, the kernel)"
    )
    print(f"WAL: {run.wal_bytes / run.window_s / 1e6:.2f} MB/s over the window (whole server)")
    print(f"PostgreSQL activity ({run.pg_samples} samples, one a second, top 14):")
    for what, n in run.pg_activity.most_common(14):
        print(f"  {n / max(1, run.pg_samples):5.2f}  {what}")
    print(f"storage (history every {step} s; per GPU-hour at 1 Hz = B/row × rows per GPU-hour):")
    total = raw = 0.0
    minute_row = {s.kind: s for s in sizes if s.tier == "1m"}
    for s in sizes:
        per_hour = s.bytes_per_gpu_hour if s.rows else 0.0
        if not s.rows and s.tier == "1h" and minute_row[s.kind].rows:
            # no complete hour yet: 1h rows have exactly the 1m rows' columns
            per_hour = minute_row[s.kind].bytes_per_row / s.gpus_per_entity
            print(f"  (fw_{s.kind}_1h empty: counted at fw_{s.kind}_1m's bytes per row)")
        print(
            f"  fw_{s.kind}_{s.tier:3s} {s.bytes / 2**20:10.1f} MiB {s.rows:>12,} rows"
            f" {fmt(s.bytes_per_row, 0):>6s} B/row {per_hour / 1000:9.1f} kB per GPU-hour"
        )
        total += per_hour
        raw += per_hour if s.tier == "raw" else 0.0
    print(
        f"  per GPU-hour: raw {raw / 1000:.1f} kB, all tiers {total / 1000:.1f} kB"
        " (Prometheus peer ~314 kB)"
    )
    return {
        "ack_p99_s": a["ack_p99_s"] if a["ack_p99_s"] is not None else math.nan,
        "max_ack_gap_s": a["max_ack_gap_s"],
        "rollup_tick_s": statistics.median(rollup_s) if rollup_s else math.nan,
        "rollup_max_s": max(rollup_s, default=math.nan),
        "retention_pass_s": max(retention_s, default=math.nan),
        "bytes_per_gpu_hour": total,
    }
