"""Fleet scale on PostgreSQL (issue 12): `.venv/bin/python bench/scale.py [--gpus 10000]
[--minutes 10] [--history-hours 3] [--history-step-s 1] [--warmup-s 20]`.

A fresh PostgreSQL database (127.0.0.1:5432) and a Redis index of its own; bench/rules.py's
inventory scaled to --gpus (1,250 nodes × 8 H200s for 10,000), a token per node;
--history-hours of history written server-side (bench/scale_history.py: raw rows every
--history-step-s seconds, the 1m and 1h tiers and the rollup state as a running system
would hold them); two uvicorn server processes (each with its ingest child) behind nginx
(docs/examples/nginx.conf when it exists, else a minimal equivalent); a real Celery worker
and beat with fleetwatch/celery.py's schedule (rollup every 30 s, retention every 600 s,
the alert rules every 10 s; bench/scale_beat.py sets the first retention tick halfway
through the window); every node on its own WebSocket through nginx at 1 Hz
(bench/scale_agents.py, nodes spread over the second) for --minutes after --warmup-s.

Prints: each batch's send → ack (p50/p99/max), the longest stretch with no ack fleet-wide,
the worker's rollup ticks and retention passes during the run (from its log), CPU per GPU
sample of the server processes and their ingest children (/proc), memory, PostgreSQL
samples (pg_stat_activity every 2 s), WAL per second, and bytes per GPU-hour per tier.
Last line:
  gpus=N ack_p99_s=X max_ack_gap_s=X rollup_tick_s=X retention_pass_s=X bytes_per_gpu_hour=X
Targets (the issue): ack_p99_s ≤ 0.5, max_ack_gap_s ≤ 1, rollup_tick_s ≤ 10.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("FLEETWATCH_TESTING", "1")

from bench import scale_history as history  # noqa: E402
from bench import scale_procs as procs  # noqa: E402
from bench.scale_agents import GPU_FIELDS, GPUS_PER_NODE  # noqa: E402
from tests.support import services  # noqa: E402
from tests.support.server import FleetServer  # noqa: E402

REDIS_DB = 15  # an index of our own on the shared Redis (bench/rules.py uses 12–14)
TARGETS = {"ack_p99_s": 0.5, "max_ack_gap_s": 1.0, "rollup_tick_s": 10.0}
PRODUCTION_ENV = {
    "FLEETWATCH_LIVE_INTERVAL_S": "0.5",  # FleetServer's test values are faster
    "FLEETWATCH_REVALIDATE_S": "5",
    "LOG_LEVEL": "INFO",
}
TASK_LINE = re.compile(
    r"^\[?(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[,.]\d+.*?task (fleet\.rollup|fleet\.retention)"
    r" (done in|failed after) ([0-9.]+) s",
    re.M,
)


@dataclass
class Bench:
    var_dir: Path
    env: dict[str, str]
    pg_name: str
    admin_url: str
    database_url: str
    redis_url: str

    @property
    def conninfo(self) -> str:
        return services._conninfo(self.database_url)


@contextlib.contextmanager
def bench_database(var_dir: Path) -> Iterator[Bench]:
    admin = services.services_database_url()
    name = f"fwscale_{uuid.uuid4().hex[:8]}"
    url = services.create_database(admin, name)
    redis_url = f"{services.services_redis_url().rsplit('/', 1)[0]}/{REDIS_DB}"
    env = FleetServer(var_dir, database_url=url, redis_url=redis_url, extra_env=PRODUCTION_ENV)
    bench = Bench(var_dir, env.env(), name, admin, url, redis_url)
    try:
        yield bench
    finally:
        from django.db import connections

        connections.close_all()
        services.drop_database(admin, name)
        import redis

        client = redis.Redis.from_url(redis_url)
        keys = client.keys("*")
        if keys:
            client.delete(*keys)


def setup_inventory(bench: Bench, gpus: int) -> list[dict[str, str]]:
    """Migrate, build bench/rules.py's inventory scaled to `gpus`; one credential per node
    (bench/rules.py gives each source the token whose SHA-256 it stores: its own name)."""
    from bench import rules

    racks = max(2, round(gpus / 20))
    rules.RACKS, rules.LOOPS = racks, max(1, math.ceil(racks / rules.RACKS_PER_LOOP))
    rules.NODES = sum(rules.nodes_in_rack(i) for i in range(racks))
    for key in ("DATABASE_URL", "REDIS_URL"):
        os.environ.pop(key, None)
    os.environ.update(bench.env)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    rules.build_inventory()
    from fleet.models import Node

    names = Node.objects.order_by("name").values_list("name", flat=True)
    return [{"source": f"node:{n}", "token": f"node:{n}"} for n in names]


@contextlib.contextmanager
def celery(
    bench: Bench, name: str, args: list[str], extra: dict[str, str]
) -> Iterator[tuple[Path, int]]:
    log = bench.var_dir / f"{name}.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "fleetwatch", *args],
            env={**bench.env, **extra},
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield log, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class PgSampler(threading.Thread):
    """pg_stat_activity of the bench database every 2 s: what its backends were doing."""

    def __init__(self, bench: Bench) -> None:
        super().__init__(daemon=True)
        self.bench, self.halt = bench, threading.Event()
        self.seen: Counter[str] = Counter()
        self.samples = 0

    def run(self) -> None:
        import psycopg

        with psycopg.connect(self.bench.conninfo, autocommit=True) as conn:
            while not self.halt.wait(2.0):
                rows = conn.execute(
                    "SELECT coalesce(wait_event_type, 'CPU'), coalesce(wait_event, '-'),"
                    " left(regexp_replace(query, '\\s+', ' ', 'g'), 70)"
                    " FROM pg_stat_activity WHERE datname = current_database()"
                    " AND state = 'active' AND pid <> pg_backend_pid()"
                ).fetchall()
                self.samples += 1
                for wait_type, wait, query in rows:
                    self.seen[f"{wait_type}/{wait}: {query}"] += 1

    def stop(self) -> None:
        self.halt.set()
        self.join(10)


def pg_value(bench: Bench, sql: str) -> Any:
    import psycopg

    with psycopg.connect(bench.conninfo, autocommit=True) as conn:
        row = conn.execute(sql).fetchone()  # type: ignore[arg-type]
        return None if row is None else row[0]


def backend_pids(bench: Bench) -> list[int]:
    import psycopg

    with psycopg.connect(bench.conninfo, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        ).fetchall()
    return [int(r[0]) for r in rows]


@dataclass
class Run:
    agents: dict[str, Any]
    window_s: float
    ticks: list[tuple[float, str, float, bool]]  # (when, task, seconds, done)
    cpu: dict[str, float]
    rss_mib: float
    wal_bytes: float
    load: list[float]
    pg_activity: Counter[str]
    pg_samples: int
    nginx_conf: str
    beat_started: float = 0.0
    notes: list[str] = field(default_factory=list)


def task_ticks(log: Path) -> list[tuple[float, str, float, bool]]:
    text = log.read_text(errors="replace") if log.exists() else ""
    return [
        (
            time.mktime(time.strptime(m[1], "%Y-%m-%d %H:%M:%S")),
            m[2],
            float(m[4]),
            m[3] == "done in",
        )
        for m in TASK_LINE.finditer(text)
    ]


def run_fleet(bench: Bench, creds_path: Path, args: argparse.Namespace) -> Run:
    servers = [
        FleetServer(
            bench.var_dir,
            database_url=bench.database_url,
            redis_url=bench.redis_url,
            extra_env=PRODUCTION_ENV,
        )
    ]
    servers.append(servers[0].sibling())
    try:
        for server in servers:
            server.start()
        with procs.nginx(bench.var_dir, [s.port for s in servers]) as (port, conf, nginx_pid):
            print(f"2 server processes on {[s.port for s in servers]}, nginx ({conf}) on {port}")
            return drive(bench, servers, (port, conf, nginx_pid), creds_path, args)
    finally:
        for server in servers:
            server.stop()


def drive(
    bench: Bench,
    servers: list[FleetServer],
    proxy: tuple[int, str, int],
    creds_path: Path,
    args: argparse.Namespace,
) -> Run:
    port, conf, nginx_pid = proxy
    window = args.minutes * 60.0
    beat_started = time.time()
    window_start = beat_started + args.warmup_s
    window_end = window_start + window
    first_retention = args.warmup_s + window / 2
    schedule = bench.var_dir / "beat-schedule"
    beat_args = ["beat", "--loglevel", "INFO", "--schedule", str(schedule)]
    beat_args += ["-S", "bench.scale_beat:FirstRetentionAt"]
    beat_env = {"FW_SCALE_FIRST_RETENTION_S": f"{first_retention:g}"}
    out = bench.var_dir / "agents.json"
    with (
        celery(bench, "worker", ["worker", "--loglevel", "INFO"], {}) as (worker_log, worker),
        celery(bench, "beat", beat_args, beat_env),
    ):
        agents = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "bench" / "scale_agents.py"),
                "--url",
                f"ws://127.0.0.1:{port}/ws/ingest/v1",
                "--creds",
                str(creds_path),
                "--window-start",
                f"{window_start:.3f}",
                "--window-end",
                f"{window_end:.3f}",
                "--out",
                str(out),
            ],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        sampler = PgSampler(bench)
        time.sleep(max(0.0, window_start - time.time()))
        roots = [s.proc.pid for s in servers if s.proc is not None]
        groups = {"nginx": [nginx_pid], "worker": [worker], "agents": [agents.pid]}
        cpu_before = {"server": procs.cpu_of(procs.with_children(roots))}
        cpu_before["postgres"] = procs.cpu_of(backend_pids(bench))
        for name, pids in groups.items():
            cpu_before[name] = procs.cpu_of(procs.with_children(pids))
        wal_before = pg_value(bench, "SELECT pg_current_wal_lsn()::text")
        sampler.start()
        load: list[float] = []
        while time.time() < window_end:
            time.sleep(min(10.0, max(0.0, window_end - time.time())))
            load.append(os.getloadavg()[0])
        sampler.stop()
        cpu_after = {"server": procs.cpu_of(procs.with_children(roots))}
        cpu_after["postgres"] = procs.cpu_of(backend_pids(bench))
        for name, pids in groups.items():
            cpu_after[name] = procs.cpu_of(procs.with_children(pids))
        rss = sum(procs.rss_mib(pid) for pid in procs.with_children(roots))
        wal = pg_value(bench, f"SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '{wal_before}')")
        _, err = agents.communicate(timeout=600)
        if agents.returncode:
            raise RuntimeError(f"agent loop failed:\n{err[-3000:]}")
    cpu = {k: procs.cpu_spent(cpu_before[k], cpu_after[k]) for k in cpu_before}
    if not any(t[1] == "fleet.rollup" for t in task_ticks(worker_log)):
        print(f"no rollup tick in the worker's log; its tail:\n{worker_log.read_text()[-3000:]}")
    return Run(
        json.loads(out.read_text()),
        window,
        task_ticks(worker_log),
        cpu,
        rss,
        float(wal),
        load,
        sampler.seen,
        sampler.samples,
        conf,
        beat_started,
    )


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
        f" unacked {a['unacked']:,}, sockets closed {a['closed']}"
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
    print(f"worker: {len(rollups)} rollup ticks, {len(passes)} retention passes in the run")
    for when, task, took, done in run.ticks:
        status = "" if done else " FAILED"
        since = when - run.beat_started
        print(
            f"  {time.strftime('%H:%M:%S', time.gmtime(when))} (+{since:4.0f} s) {task}"
            f" {took:.3f} s{status}"
        )
    rollup_s = [t[2] for t in rollups if t[3]]
    retention_s = [t[2] for t in passes if t[3]]
    samples = a["acked"] * GPUS_PER_NODE
    print("CPU over the window (s; per GPU sample acked):")
    for who, spent in run.cpu.items():
        per = spent / samples * 1e6 if samples else math.nan
        print(f"  {who:9s} {spent:8.1f} s  {per:6.1f} µs per GPU sample")
    server = run.cpu["server"] / samples * 1e6 if samples else math.nan
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
    print(f"WAL: {run.wal_bytes / run.window_s / 1e6:.2f} MB/s over the window (whole server)")
    print(f"PostgreSQL activity ({run.pg_samples} samples of active backends, top 8):")
    for what, n in run.pg_activity.most_common(8):
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


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--history-hours", type=float, default=3)
    parser.add_argument(
        "--history-step-s", type=int, default=1, choices=(1, 2, 3, 5, 10, 15, 30, 60)
    )
    parser.add_argument("--warmup-s", type=float, default=20)
    args = parser.parse_args()
    print(f"machine: {machine()}", flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="fw-bench-scale-") as tmp,
        bench_database(Path(tmp)) as bench,
    ):
        print(
            f"PostgreSQL: {pg_value(bench, 'SHOW server_version')}, shared_buffers"
            f" {pg_value(bench, 'SHOW shared_buffers')}, max_wal_size"
            f" {pg_value(bench, 'SHOW max_wal_size')}; database {bench.pg_name}",
            flush=True,
        )
        started = time.perf_counter()
        creds = setup_inventory(bench, args.gpus)
        gpus = len(creds) * GPUS_PER_NODE
        creds_path = Path(tmp) / "creds.json"
        creds_path.write_text(json.dumps(creds))
        print(
            f"inventory: {len(creds)} nodes × {GPUS_PER_NODE} = {gpus} GPUs"
            f" ({time.perf_counter() - started:.1f} s)",
            flush=True,
        )
        end = int(time.time()) // 60 * 60
        hist = history.History(
            end - int(args.history_hours * 3600) // 60 * 60, end, args.history_step_s
        )
        parts = history.ensure_partitions_if_any(bench.conninfo, hist, time.time())
        print(f"partitions: {parts}")
        print(
            f"history: {hist.hours:g} h of {gpus} GPUs and {len(creds)} nodes, a raw row every"
            f" {hist.step_s} s" + ("" if hist.step_s == 1 else " (coarser than a fleet's 1 Hz)"),
            flush=True,
        )
        times = history.preload(bench.conninfo, hist, len(creds), lambda s: print(s, flush=True))
        print(
            f"  history written: {times.raw_rows:,} raw rows in {times.raw_s:.1f} s"
            f" ({times.raw_rows / max(times.raw_s, 1e-9):,.0f} rows/s),"
            f" tiers {times.rollups_s:.1f} s,"
            f" vacuum+analyze {times.analyze_s:.1f} s",
            flush=True,
        )
        run = run_fleet(bench, creds_path, args)
        sizes = history.tier_sizes(bench.conninfo)
        figures = report(run, sizes, gpus, hist.step_s)
    print(
        f"rollup tick: median {fmt(figures['rollup_tick_s'])} s,"
        f" max {fmt(figures['rollup_max_s'])} s"
    )
    print(
        "targets: "
        + "; ".join(
            f"{k} ≤ {v:g}: {'met' if figures[k] <= v else 'NOT MET'}" for k, v in TARGETS.items()
        )
    )
    print(
        f"gpus={gpus} ack_p99_s={fmt(figures['ack_p99_s'])}"
        f" max_ack_gap_s={fmt(figures['max_ack_gap_s'])}"
        f" rollup_tick_s={fmt(figures['rollup_tick_s'])}"
        f" retention_pass_s={fmt(figures['retention_pass_s'])}"
        f" bytes_per_gpu_hour={figures['bytes_per_gpu_hour']:.0f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
