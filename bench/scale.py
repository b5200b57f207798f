"""Fleet scale on PostgreSQL (issue 12): `.venv/bin/python bench/scale.py [--gpus 10000]
[--minutes 10] [--history-hours 3] [--history-step-s 1] [--warmup-s 20]`.

A fresh PostgreSQL database (127.0.0.1:5432) and a Redis index of its own; bench/rules.py's
inventory scaled to --gpus (1,250 nodes × 8 H200s for 10,000), a token per node;
--history-hours of history written server-side (bench/scale_history.py: raw rows every
--history-step-s seconds, the 1m and 1h tiers and the rollup state as a running system
would hold them); two uvicorn server processes (each with its ingest child) behind nginx
(docs/examples/nginx.conf when it exists, else a minimal equivalent); the two Celery
workers of docs/operations.md (alerts; maintenance, --pool solo) and a beat with
fleetwatch/celery.py's schedule (rollup every 30 s, retention every 600 s, the alert rules
every 10 s; bench/scale_beat.py sets the first retention tick halfway through the
window); every node on its own WebSocket through nginx at 1 Hz
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
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.environment import use_bench_settings  # noqa: E402

use_bench_settings()

from bench import scale_history as history  # noqa: E402
from bench import scale_procs as procs  # noqa: E402
from bench.scale_agents import GPUS_PER_NODE  # noqa: E402
from bench.scale_report import Run, fmt, machine, report, task_ticks  # noqa: E402
from tests.support import services  # noqa: E402
from tests.support.processes import stop_process  # noqa: E402
from tests.support.server import FleetServer  # noqa: E402

REDIS_DB = 15  # an index of our own on the shared Redis (bench/rules.py uses 12–14)
TARGETS = {"ack_p99_s": 0.5, "max_ack_gap_s": 1.0, "rollup_tick_s": 10.0}
# The two workers of docs/operations.md ("Alerting"): rollup and retention on their own.
ALERTS_WORKER = ["worker", "-Q", "rules,notifications,celery", "--concurrency", "2"]
ALERTS_WORKER += ["--loglevel", "INFO", "-n", "alerts@%h"]
MAINTENANCE_WORKER = ["worker", "-Q", "maintenance", "--pool", "solo", "--loglevel", "INFO"]
MAINTENANCE_WORKER += ["-n", "maintenance@%h"]
PRODUCTION_ENV = {
    "FLEETWATCH_LIVE_INTERVAL_S": "0.5",  # FleetServer's test values are faster
    "FLEETWATCH_REVALIDATE_S": "5",
    "LOG_LEVEL": "INFO",
}


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
    (bench/rules_inventory.py gives each source the token whose SHA-256 it stores: its own
    name)."""
    from bench import rules_inventory as plan

    racks = max(2, round(gpus / 20))
    plan.RACKS, plan.LOOPS = racks, max(1, math.ceil(racks / plan.RACKS_PER_LOOP))
    plan.NODES = sum(plan.nodes_in_rack(i) for i in range(racks))
    for key in ("DATABASE_URL", "REDIS_URL"):
        os.environ.pop(key, None)
    os.environ.update(bench.env)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    plan.build_inventory()
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
        stop_process(proc, 60)


class PgSampler(threading.Thread):
    """pg_stat_activity of the bench database every second: what its backends were doing
    (active ones, and idle ones whose last statement was rollup bookkeeping: a rollup
    waiting between polls shows there)."""

    def __init__(self, bench: Bench) -> None:
        super().__init__(daemon=True)
        self.bench, self.halt = bench, threading.Event()
        self.seen: Counter[str] = Counter()
        self.samples = 0

    def run(self) -> None:
        import psycopg

        with psycopg.connect(self.bench.conninfo, autocommit=True) as conn:
            while not self.halt.wait(1.0):
                rows = conn.execute(
                    "SELECT state, coalesce(wait_event_type, 'CPU'), coalesce(wait_event, '-'),"
                    " left(regexp_replace(query, '\\s+', ' ', 'g'), 90)"
                    " FROM pg_stat_activity WHERE datname = current_database()"
                    " AND pid <> pg_backend_pid() AND (state <> 'idle' OR query ~"
                    " 'fw_rollup_state|pg_locks|snapshot|_late|fw_gpu_1m|fw_gpu_1h')"
                ).fetchall()
                self.samples += 1
                for state, wait_type, wait, query in rows:
                    where = wait_type if state == "active" else state
                    self.seen[f"{where}/{wait}: {query}"] += 1

    def stop(self) -> None:
        self.halt.set()
        self.join(10)


def pg_rows(bench: Bench, sql: str) -> list[tuple[Any, ...]]:
    """The rows of one query on the bench database, on a connection of its own."""
    import psycopg

    with psycopg.connect(bench.conninfo, autocommit=True) as conn:
        return conn.execute(sql).fetchall()  # type: ignore[arg-type]


def pg_value(bench: Bench, sql: str) -> Any:
    rows = pg_rows(bench, sql)
    return rows[0][0] if rows else None


def backend_pids(bench: Bench) -> list[int]:
    rows = pg_rows(
        bench,
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND pid <> pg_backend_pid()",
    )
    return [int(r[0]) for r in rows]


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
        celery(bench, "alerts-worker", ALERTS_WORKER, {}) as (alerts_log, alerts_worker),
        celery(bench, "maintenance-worker", MAINTENANCE_WORKER, {}) as (worker_log, worker),
        celery(bench, "beat", beat_args, beat_env),
    ):
        agents = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.scale_agents",
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
        groups = {
            "nginx": [nginx_pid],
            "alerts worker": [alerts_worker],
            "maint. worker": [worker],
            "agents": [agents.pid],
        }
        cpu_before = {"server loops": procs.cpu_of(roots)}
        cpu_before["ingest children"] = procs.cpu_of(procs.children(roots))
        cpu_before["postgres"] = procs.cpu_of(backend_pids(bench))
        for name, pids in groups.items():
            cpu_before[name] = procs.cpu_of(procs.with_children(pids))
        wal_before = pg_value(bench, "SELECT pg_current_wal_lsn()::text")
        busy_before = procs.machine_busy_s()
        threads_before = [procs.thread_cpu_seconds(pid) for pid in roots]
        sampler.start()
        load: list[float] = []
        while time.time() < window_end:
            time.sleep(min(10.0, max(0.0, window_end - time.time())))
            load.append(os.getloadavg()[0])
        sampler.stop()
        cpu_after = {"server loops": procs.cpu_of(roots)}
        cpu_after["ingest children"] = procs.cpu_of(procs.children(roots))
        cpu_after["postgres"] = procs.cpu_of(backend_pids(bench))
        for name, pids in groups.items():
            cpu_after[name] = procs.cpu_of(procs.with_children(pids))
        busy = procs.machine_busy_s() - busy_before
        threads = [procs.thread_cpu_seconds(pid) for pid in roots]
        loop_s = sum(t[0] - b[0] for t, b in zip(threads, threads_before, strict=True))
        thread_s = sum(t[1] - b[1] for t, b in zip(threads, threads_before, strict=True))
        rss = sum(procs.rss_mib(pid) for pid in procs.with_children(roots))
        wal = pg_value(bench, f"SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '{wal_before}')")
        _, err = agents.communicate(timeout=600)
        if agents.returncode:
            raise RuntimeError(f"agent loop failed:\n{err[-3000:]}")
    cpu = {k: procs.cpu_spent(cpu_before[k], cpu_after[k]) for k in cpu_before}
    cpu["everything else"] = max(0.0, busy - sum(cpu.values()))
    print(
        f"server processes: event-loop thread {loop_s:.1f} s, other threads {thread_s:.1f} s"
        " (sync database calls, the live publisher)"
    )
    if not any(t[1] == "fleet.rollup" for t in task_ticks(worker_log)):
        print(f"no rollup tick in the worker's log; its tail:\n{worker_log.read_text()[-3000:]}")
    return Run(
        json.loads(out.read_text()),
        window,
        sorted(task_ticks(worker_log) + task_ticks(alerts_log)),
        cpu,
        rss,
        float(wal),
        load,
        sampler.seen,
        sampler.samples,
        conf,
        beat_started,
    )


def expired_hours(hist: history.History, args: argparse.Namespace) -> str:
    """What the mid-run retention pass can drop of this history where raw tables are hour
    partitions: the hours wholly older than the raw retention when it runs (about)."""
    from django.conf import settings

    passes_at = time.time() + args.warmup_s + args.minutes * 30
    cutoff = passes_at - float(settings.RETENTION_RAW_HOURS) * 3600
    first = hist.start // 3600 * 3600
    hours = [h for h in range(first, hist.end, 3600) if h + 3600 <= cutoff]
    return (
        f"raw retention {settings.RETENTION_RAW_HOURS} h: with hour partitions, the pass in"
        f" the middle of the window can drop {len(hours)} hour(s) of this history per kind"
    )


def ingest_writers(bench: Bench) -> list[str]:
    """Each ingest child's own counters (fleet_ingestwriter, saved every 10 s)."""
    rows = pg_rows(
        bench,
        "SELECT writer, batches, samples, refused, retried, saves, save_failures"
        " FROM fleet_ingestwriter ORDER BY started_at",
    )
    return [
        f"ingest writer {w}: {b:,} batches, {n:,} samples, {r} refused, {t} answered 503,"
        f" {v:,} latest-state saves ({f} failed)"
        for w, b, n, r, t, v, f in rows
    ]


def keep_logs(tmp: Path, logs_dir: Path) -> None:
    logs_dir.mkdir(parents=True, exist_ok=True)
    kept = [tmp / "agents.json", tmp / "nginx.conf", tmp / "pg_activity.json"]
    for path in [*tmp.glob("*.log"), *kept]:
        if path.exists():
            shutil.copy(path, logs_dir / path.name)
    print(f"logs kept in {logs_dir}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument(
        "--history-hours",
        type=float,
        default=3,
        help="on PostgreSQL raw partitions are an hour wide and dropped once wholly past the"
        " 3 h retention: 4 gives the mid-run retention pass an expired partition to drop",
    )
    parser.add_argument(
        "--history-step-s",
        type=int,
        default=1,
        choices=(1, 2, 3, 5, 10, 15, 30, 60),
        help="seconds between history rows (1 Hz: 36 M GPU rows an hour at 10,000 GPUs)",
    )
    parser.add_argument("--warmup-s", type=float, default=20)
    parser.add_argument(
        "--logs-dir",
        default=f"/tmp/fw-scale-{time.strftime('%Y%m%dT%H%M%S')}",
        help="where the servers', worker's, beat's and nginx's logs are copied",
    )
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
        print(f"  {expired_hours(hist, args)}")
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
        try:
            run = run_fleet(bench, creds_path, args)
            writers = ingest_writers(bench)
            (Path(tmp) / "pg_activity.json").write_text(json.dumps(run.pg_activity.most_common()))
            sizes = history.tier_sizes(bench.conninfo)
        finally:
            keep_logs(Path(tmp), Path(args.logs_dir))
        for row in writers:
            print(row)
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
