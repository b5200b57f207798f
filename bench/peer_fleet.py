"""The Fleetwatch side of bench/peer.py, as bench/scale.py runs it: a fresh PostgreSQL
database with bench/rules.py's inventory (a token per node), two uvicorn server processes
(each with its ingest child, production intervals) behind nginx, the maintenance worker of
docs/operations.md and a beat with only the storage's upkeep (bench/peer_beat.py), and
every node on its own WebSocket at 1 Hz carrying the trace stream (bench/peer_agents.py).

Raw spans are sealed and packed every 5 minutes (FLEETWATCH_RAW_PACK_MINUTES=5, the
beat's fleet.pack), as Prometheus's blocks are forced to 5 minutes on its side: both sides'
disk is measured after their own sealing.

What it spent: CPU of the server processes, their ingest children, the database's
backends, nginx, the worker and the beat over the window, over the GPU samples
acknowledged in it; what it keeps: every fw_* table (raw, packed and rollup tiers, their
partitions, TOAST and indexes) at the end, over the GPU samples stored.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import scale_history as history
from bench import scale_procs as procs
from bench.scale import (
    MAINTENANCE_WORKER,
    PRODUCTION_ENV,
    Bench,
    backend_pids,
    celery,
    pg_rows,
    setup_inventory,
)
from bench.scale_agents import GPUS_PER_NODE
from fleet.storage import raw_span
from tests.support.server import FleetServer

ROOT = Path(__file__).resolve().parent.parent

PACK_MINUTES = "5"  # Prometheus's side: --storage.tsdb.min/max-block-duration=5m


def seal_like_prometheus() -> None:
    """Pack raw spans of PACK_MINUTES (and cut raw partitions that wide): set before the
    database is migrated, so every process of the side (the migration's partitions, the
    servers, their ingest children, the worker) inherits it."""
    os.environ[raw_span.ENV] = PACK_MINUTES


@dataclass
class FleetRun:
    window_s: float
    cpu: dict[str, float]  # CPU seconds over the window, per process group
    agents: dict[str, Any]  # bench/scale_agents.py's summary
    table_bytes: dict[str, int]  # fw_<kind>_<tier> → bytes, partitions and indexes included
    empty_bytes: dict[str, int]  # the same before the first sample (empty partitions' pages)
    gpu_rows: int  # GPU samples stored over the whole run (raw rows and packed spans)
    machine_busy_s: float
    rollup_log: str
    wal_bytes: float = 0.0  # PostgreSQL WAL written over the window (recycled, not kept)

    @property
    def gpu_samples(self) -> int:
        return int(self.agents["acked"]) * GPUS_PER_NODE

    @property
    def grown(self) -> dict[str, int]:
        """What each table grew by over the run: the bytes its samples and rollups took."""
        return {t: size - self.empty_bytes.get(t, 0) for t, size in self.table_bytes.items()}

    @property
    def total_bytes(self) -> int:
        return sum(self.grown.values())


def fw_table_bytes(bench: Bench) -> dict[str, int]:
    """pg_total_relation_size of every fw_* table that is not a partition, summed over its
    partitions (what the database keeps for Fleetwatch's samples and rollups). A table that
    is not partitioned (latest state, late marks, packed spans) counts as itself:
    pg_partition_tree lists nothing for it."""
    rows = pg_rows(
        bench,
        "SELECT c.relname, CASE WHEN c.relkind = 'r' THEN pg_total_relation_size(c.oid)"
        " ELSE (SELECT coalesce(sum(pg_total_relation_size(p.relid)), 0)"
        " FROM pg_partition_tree(c.oid) p) END"
        " FROM pg_class c WHERE c.relname LIKE 'fw\\_%' AND c.relkind IN ('r', 'p')"
        " AND NOT c.relispartition",
    )
    return {str(name): int(size) for name, size in rows if int(size)}


@dataclass(frozen=True)
class Plan:
    nodes: int
    seconds: float  # the measured window
    warmup_s: float
    origin: int  # the stream's epoch second (bench/peer_stream.py)


def run_fleetwatch(bench: Bench, plan: Plan, log: Callable[[str], None]) -> FleetRun:
    # bench/rules.py's inventory rounds to whole racks: the first `nodes` of it report.
    creds = setup_inventory(bench, plan.nodes * GPUS_PER_NODE)[: plan.nodes]
    creds_path = bench.var_dir / "creds.json"
    creds_path.write_text(json.dumps(creds))
    now = time.time()
    minute = int(now) // 60 * 60
    made = history.ensure_partitions_if_any(bench.conninfo, history.History(minute, minute, 1), now)
    log(f"  partitions: {made}")
    empty = fw_table_bytes(bench)
    log(f"  inventory: {len(creds)} nodes × {GPUS_PER_NODE} GPUs")
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
        with procs.nginx(bench.var_dir, [s.port for s in servers]) as (port, _conf, nginx_pid):
            run = _drive(bench, servers, port, nginx_pid, creds_path, plan, log)
            run.empty_bytes = empty
            return run
    finally:
        for server in servers:
            server.stop()


def _drive(
    bench: Bench,
    servers: list[FleetServer],
    port: int,
    nginx_pid: int,
    creds_path: Path,
    plan: Plan,
    log: Callable[[str], None],
) -> FleetRun:
    window_start = time.time() + plan.warmup_s
    window_end = window_start + plan.seconds
    out = bench.var_dir / "agents.json"
    beat_args = ["beat", "--loglevel", "INFO", "--schedule", str(bench.var_dir / "beat-schedule")]
    beat_args += ["-S", "bench.peer_beat:StorageOnly"]
    with (
        celery(bench, "maintenance-worker", MAINTENANCE_WORKER, {}) as (worker_log, worker),
        celery(bench, "beat", beat_args, {}) as (_beat_log, beat),
    ):
        agents = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.peer_agents",
                "--origin",
                str(plan.origin),
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
        time.sleep(max(0.0, window_start - time.time()))
        roots = [s.proc.pid for s in servers if s.proc is not None]

        def groups() -> dict[str, list[int]]:
            return {
                "server loops": roots,
                "ingest children": procs.children(roots),
                "postgres backends": backend_pids(bench),
                "nginx": procs.with_children([nginx_pid]),
                "maintenance worker": procs.with_children([worker]),
                "beat": procs.with_children([beat]),
                "agents (load)": [agents.pid],
            }

        before = {k: procs.cpu_of(v) for k, v in groups().items()}
        wal_at = pg_rows(bench, "SELECT pg_current_wal_lsn()::text")[0][0]
        busy = procs.machine_busy_s()
        while time.time() < window_end:
            time.sleep(min(30.0, max(0.0, window_end - time.time())))
            log(f"  fleetwatch: {time.time() - window_start:.0f} s, load {os.getloadavg()[0]:.1f}")
        after = {k: procs.cpu_of(v) for k, v in groups().items()}
        wal = pg_rows(bench, f"SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '{wal_at}')")[0][0]
        busy = procs.machine_busy_s() - busy
        _, err = agents.communicate(timeout=600)
        if agents.returncode:
            raise RuntimeError(f"agent loop failed:\n{err[-3000:]}")
        _wait_sealed(bench, window_end, log)
    cpu = {k: procs.cpu_spent(before[k], after[k]) for k in before}
    rows = pg_rows(
        bench,
        "SELECT (SELECT count(*) FROM fw_gpu_raw)"
        " + (SELECT coalesce(sum(n), 0) FROM fw_gpu_packed)",
    )
    return FleetRun(
        window_s=plan.seconds,
        cpu=cpu,
        agents=json.loads(out.read_text()),
        table_bytes=fw_table_bytes(bench),
        empty_bytes={},
        gpu_rows=int(rows[0][0]),
        machine_busy_s=busy,
        rollup_log=worker_log.read_text(errors="replace"),
        wal_bytes=float(wal),
    )


SEAL_WAIT_S = 300.0  # the beat's rollup runs every 30 s and its packer every 60 s


def _wait_sealed(bench: Bench, end: float, log: Callable[[str], None]) -> None:
    """After the last sample: let the side seal what it can, as Prometheus has compacted
    its blocks inside its run (the issue: each side's disk "after its own sealing"). Every
    span that ended by `end` is packed once the rollup has passed it and the packer's next
    pass has run; what stays raw is the open span, 0-5 minutes of rows by where `end` falls.
    Not counted in the CPU window."""
    width = int(PACK_MINUTES) * 60
    closed = int(end // width * width)
    deadline = time.time() + SEAL_WAIT_S
    left = -1
    while time.time() < deadline:
        left = int(pg_rows(bench, f"SELECT count(*) FROM fw_gpu_raw WHERE ts < {closed}")[0][0])
        if left == 0:
            break
        time.sleep(5.0)
    at = time.strftime("%H:%M:%S", time.gmtime(closed))
    waited = SEAL_WAIT_S - max(0.0, deadline - time.time())
    log(
        f"  sealed after the run: raw GPU rows before {at} UTC left {left}"
        f" (waited {waited:.0f} s); the open span holds {end - closed:.0f} s of rows"
    )
