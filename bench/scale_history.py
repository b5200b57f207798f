"""History for bench/scale.py, generated inside PostgreSQL, and the size of every tier.

A fleet that has run for hours holds raw rows back to the retention horizon, 1m rows for
every complete minute and 1h rows for every complete hour, with the rollup state saying
so. Sending that through the ingest path would take hours on this VM (108 M raw rows for
3 h of 10,000 GPUs), so it is written server-side: `INSERT … SELECT … FROM
generate_series` into the parent raw tables (partitioned or not, the same statement),
1m/1h rows shaped as the rollup writes them (the same columns non-NULL, `n` counting the
samples of the bucket), and `fw_rollup_state` set as a running system would have it
(1m done to the last minute of history, 1h to the last complete hour).

The history carries the same fields as the bench's live agents (bench/scale_agents.py),
so its rows are as wide as live ones. At a coarser `step_s` than 1 s the raw tier holds
fewer rows than a real fleet would (said in the bench's output), and sizes are reported
per row and per GPU-hour at 1 Hz.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from agents.protocol.metrics import METRICS
from bench.scale_agents import GPU_FIELDS, GPUS_PER_NODE, NODE_FIELDS

KINDS = ("gpu", "node")
FIELDS: dict[str, dict[str, float | int] | dict[str, float]] = {
    "gpu": GPU_FIELDS,
    "node": NODE_FIELDS,
}
# Raw rows written per INSERT: bounds each transaction (and shows progress).
ROWS_PER_CHUNK = 2_000_000
PARALLEL = 2  # one INSERT per core; PostgreSQL runs each on one backend


@dataclass(frozen=True)
class History:
    start: int  # epoch seconds, inclusive
    end: int  # exclusive; a minute boundary
    step_s: int

    @property
    def hours(self) -> float:
        return (self.end - self.start) / 3600


@dataclass
class PreloadTimes:
    raw_s: float = 0.0
    rollups_s: float = 0.0
    analyze_s: float = 0.0
    raw_rows: int = 0
    partitions: str = "none"


def _value(name: str, value: float | int) -> str:
    """A column's value in a generated row: the live sample's, wobbling with time for
    floats (t is the row's time), as the agents' values do."""
    if isinstance(value, int):
        return f"{value}::bigint"
    return f"({float(value)!r} + (t %% 7))::double precision"


def _entities(kind: str) -> str:
    if kind == "gpu":
        return "(SELECT id AS node_id FROM fleet_node) e CROSS JOIN generate_series(0, 7) AS gpu"
    return "(SELECT id AS node_id FROM fleet_node) e"


def _keys(kind: str) -> list[str]:
    return ["node_id", "gpu"] if kind == "gpu" else ["node_id"]


def raw_insert_sql(kind: str) -> str:
    fields = FIELDS[kind]
    columns = ["ts", *_keys(kind), *fields]
    values = ["t::double precision", *_keys(kind), *(_value(f, v) for f, v in fields.items())]
    return (
        f"INSERT INTO fw_{kind}_raw ({', '.join(columns)}) SELECT {', '.join(values)}"
        f" FROM generate_series(%s::bigint, %s::bigint - 1, %s::bigint) AS t"
        f" CROSS JOIN {_entities(kind)}"
    )


def rollup_insert_sql(kind: str, tier: str) -> str:
    """Every (entity, bucket) in [lo, hi) of `tier`, as the rollup would have stored it
    from this history: min = mean = max = last = the value, `n` the samples in it."""
    fields = FIELDS[kind]
    columns, values = [*_keys(kind), "bucket", "n"], [*_keys(kind), "t", "%s::int"]
    for metric in METRICS[kind]:
        value = _value(metric.name, fields[metric.name]) if metric.name in fields else "NULL"
        for stat in ("min", "mean", "max", "last"):
            columns.append(f"{metric.name}_{stat}")
            values.append(value)
    return (
        f"INSERT INTO fw_{kind}_{tier} ({', '.join(columns)}) SELECT {', '.join(values)}"
        f" FROM generate_series(%s::bigint, %s::bigint - 1, %s::bigint) AS t"
        f" CROSS JOIN {_entities(kind)}"
    )


def ensure_partitions_if_any(conninfo: str, history: History, now: float) -> str:
    """Where raw and rollup tables are time partitions (`fleet.storage.partitions`,
    PostgreSQL), make them as a running system has them (`ensure_partitions(now)`: from
    each tier's retention horizon to ahead of now) and, for history older than that
    horizon, over [history start, now) too (what `manage.py partitions --cover` does)."""
    try:
        module = importlib.import_module("fleet.storage.partitions")
    except ImportError:
        return "none (fleet.storage.partitions absent: plain tables)"
    made: list[str] = list(module.ensure_partitions(now))
    spans = {
        module.Family(kind, tier): (float(history.start), now)
        for kind in KINDS
        for tier in module.PARTITIONED_TIERS
    }
    made += module.ensure_between(module.django_runner("default"), spans)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'fw_gpu_raw'::regclass"
        ).fetchone()
    return f"{len(made)} made; fw_gpu_raw has {row[0] if row else 0} partitions"


def _run_chunks(conninfo: str, sql: str, chunks: Sequence[tuple[Any, ...]]) -> None:
    """The statements over PARALLEL connections, each chunk its own transaction."""
    pending = list(chunks)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            with psycopg.connect(conninfo, autocommit=True) as conn:
                conn.execute("SET synchronous_commit = off")  # a bulk load, not an ack
                conn.execute("SET jit = off")
                while True:
                    with lock:
                        if not pending or errors:
                            return
                        params = pending.pop(0)
                    conn.execute(sql, params)  # type: ignore[arg-type]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(PARALLEL)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _time_chunks(start: int, end: int, step: int, rows_per_t: int) -> list[tuple[int, int, int]]:
    span = max(step, (ROWS_PER_CHUNK // max(1, rows_per_t)) * step)
    return [(lo, min(end, lo + span), step) for lo in range(start, end, span)]


def set_state(conn: psycopg.Connection[Any], tier: str, kind: str, done: int) -> None:
    """The tier computed up to `done`; where the 1m state has a seal (`sealed_until`,
    migration 0015) it stands there too, as the migration and the rollup leave it."""
    columns = {
        str(r[0])
        for r in conn.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_name = 'fw_rollup_state' AND table_schema = current_schema()"
        )
    }
    names = ["tier", "kind", "done_until"] + [c for c in ("sealed_until",) if c in columns]
    values = [tier, kind, done] + [done] * (len(names) - 3)
    updates = ", ".join(f"{c} = excluded.{c}" for c in names[2:])
    if "dirty_from" in columns:
        updates += ", dirty_from = NULL"
    conn.execute(
        f"INSERT INTO fw_rollup_state ({', '.join(names)})"  # type: ignore[arg-type]
        f" VALUES ({', '.join(['%s'] * len(names))})"
        f" ON CONFLICT (tier, kind) DO UPDATE SET {updates}",
        values,
    )


def preload(
    conninfo: str, history: History, nodes: int, say: Callable[[str], None]
) -> PreloadTimes:
    times = PreloadTimes()
    started = time.perf_counter()
    for kind in KINDS:
        per_t = nodes * (GPUS_PER_NODE if kind == "gpu" else 1)
        chunks = _time_chunks(history.start, history.end, history.step_s, per_t)
        t0 = time.perf_counter()
        _run_chunks(conninfo, raw_insert_sql(kind), chunks)
        rows = per_t * len(range(history.start, history.end, history.step_s))
        times.raw_rows += rows
        say(f"  raw {kind}: {rows:,} rows in {time.perf_counter() - t0:.1f} s")
    times.raw_s = time.perf_counter() - started
    started = time.perf_counter()
    hour_end = history.end // 3600 * 3600
    hour_start = history.start // 3600 * 3600
    for kind in KINDS:
        per_t = nodes * (GPUS_PER_NODE if kind == "gpu" else 1)
        minute_chunks = [
            (60 // history.step_s, *c) for c in _time_chunks(history.start, history.end, 60, per_t)
        ]
        _run_chunks(conninfo, rollup_insert_sql(kind, "1m"), minute_chunks)
        if hour_start < hour_end:
            hour_chunks = [(3600 // history.step_s, hour_start, hour_end, 3600)]
            _run_chunks(conninfo, rollup_insert_sql(kind, "1h"), hour_chunks)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for kind in KINDS:
            for tier, done in (("1m", history.end), ("1h", hour_end)):
                set_state(conn, tier, kind, done)
    times.rollups_s = time.perf_counter() - started
    say(f"  1m and 1h tiers and rollup state: {times.rollups_s:.1f} s")
    started = time.perf_counter()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        # A running system's autovacuum would have seen these rows arrive over hours:
        # vacuum (visibility map, hint bits) and statistics now, not during the run.
        for kind in KINDS:
            for table in (f"fw_{kind}_raw", f"fw_{kind}_1m", f"fw_{kind}_1h"):
                conn.execute(f"VACUUM (ANALYZE) {table}")  # type: ignore[arg-type]
    times.analyze_s = time.perf_counter() - started
    say(f"  VACUUM (ANALYZE) of the tiers: {times.analyze_s:.1f} s")
    return times


@dataclass(frozen=True)
class TierSize:
    kind: str
    tier: str
    bytes: int
    rows: int
    seconds_per_row: int  # the span one row stands for at 1 Hz: 1, 60, 3600
    gpus_per_entity: int

    @property
    def bytes_per_row(self) -> float:
        return self.bytes / self.rows if self.rows else float("nan")

    @property
    def bytes_per_gpu_hour(self) -> float:
        """What one GPU-hour costs in this table at 1 Hz: rows per GPU-hour × B/row."""
        rows_per_gpu_hour = 3600 / self.seconds_per_row / self.gpus_per_entity
        return self.bytes_per_row * rows_per_gpu_hour


def tier_sizes(conninfo: str) -> list[TierSize]:
    """pg_total_relation_size (heap, TOAST, indexes) summed over each table and its
    partitions (pg_partition_tree: none for a plain table), and exact row counts."""
    sizes: list[TierSize] = []
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for kind in KINDS:
            for tier, span in (("raw", 1), ("1m", 60), ("1h", 3600)):
                table = f"fw_{kind}_{tier}"
                size = conn.execute(
                    "SELECT coalesce(sum(pg_total_relation_size(r)), 0) FROM ("
                    " SELECT %s::regclass AS r UNION SELECT relid FROM pg_partition_tree(%s)) t",
                    (table, table),
                ).fetchone()
                rows = conn.execute(f"SELECT count(*) FROM {table}").fetchone()  # type: ignore[arg-type]
                assert size is not None and rows is not None
                per = GPUS_PER_NODE if kind == "node" else 1
                sizes.append(TierSize(kind, tier, int(size[0]), int(rows[0]), span, per))
    return sizes
