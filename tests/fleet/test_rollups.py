"""1-minute and 1-hour rollups against what the raw tier holds, on every tier.

A known series goes straight into the raw tables (several GPUs and nodes, a
slow field present in only some samples, a counter, an integer gauge); the
expected min/mean/max/last per bucket is computed here in Python from the same
rows, and the rollup tables must equal it exactly.

`fresh_db` (also used by the retention and worker tests) gives each test its
own migrated database, SQLite file or PostgreSQL database, cloned from a
template migrated once per session, reachable in-process through a Django
connection alias.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.db import connections, transaction

from fleet.storage.late import late_table
from fleet.storage.partitions import django_runner, ensure_between, families
from fleet.storage.rollups import claim, read_state, rollup
from fleet.storage.schema import ENTITY_COLUMNS, raw_table, rollup_table
from fleetwatch.env import database_from_url, sqlite_database
from tests.support import services

ROOT = Path(__file__).resolve().parents[2]
T = 1_800_000_000  # an hour boundary: buckets line up with round numbers
DB_FILE = "fleetwatch.sqlite3"

# ---------------------------------------------------------------------------
# a fresh migrated database per test


@dataclass
class TierDb:
    tier: str
    alias: str
    var_dir: Path
    url: str | None  # PostgreSQL URL (services tier); None for SQLite

    @property
    def vendor(self) -> str:
        return connections[self.alias].vendor

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with connections[self.alias].cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall()) if cur.description else []

    def insert(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        marks = ", ".join(["%s"] * len(columns))
        # one transaction: SQLite autocommit would fsync every row
        with transaction.atomic(using=self.alias), connections[self.alias].cursor() as cur:
            cur.executemany(
                f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", list(rows)
            )


_templates: dict[str, str] = {}


def _migrate(var_dir: Path, database_url: str | None) -> None:
    env = dict(os.environ, FLEETWATCH_TESTING="1", FLEETWATCH_VAR_DIR=str(var_dir))
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    if database_url:
        env["DATABASE_URL"] = database_url
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", "-v0"],
        env=env,
        cwd=ROOT,
        check=True,
        timeout=120,
    )
    if database_url:
        # PostgreSQL tables are partitioned by time and the migration made partitions around
        # the real now: add them around the fixed test clock T, and a day behind now (tests
        # that store expired rows). Once per session, in the template every test clones.
        now, day = int(time.time()), 86400
        spans = [
            ("raw", T - 2 * day, T + day),
            ("1m", T - 10 * day, T + 2 * day),
            ("1h", T - 460 * day, T + 62 * day),
            ("raw", now - day, now),
        ]
        cover = [arg for tier, lo, hi in spans for arg in ("--cover", tier, str(lo), str(hi))]
        subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "partitions", "--quiet", *cover],
            env=env,
            cwd=ROOT,
            check=True,
            timeout=300,
        )


def _template(tier: str, factory: pytest.TempPathFactory) -> str:
    """Migrate once per session and tier: a SQLite file path, or a PostgreSQL db name."""
    if tier not in _templates:
        if tier == "embedded":
            var_dir = factory.mktemp("template")
            _migrate(var_dir, None)
            _templates[tier] = str(var_dir / DB_FILE)
        else:
            name = f"fwtpl_{uuid.uuid4().hex[:10]}"
            admin = services.services_database_url()
            _migrate(factory.mktemp("template"), services.create_database(admin, name))
            atexit.register(services.drop_database, admin, name)
            _templates[tier] = name
    return _templates[tier]


def _register(alias: str, db: dict[str, Any]) -> None:
    # configure_settings insists on a "default"; only our alias's entry is kept.
    configured = connections.configure_settings({"default": dict(db), alias: dict(db)})
    connections.settings[alias] = configured[alias]


@contextlib.contextmanager
def fresh_db(
    tier: str, var_dir: Path, factory: pytest.TempPathFactory, blocker: Any
) -> Iterator[TierDb]:
    template = _template(tier, factory)
    alias = f"t_{uuid.uuid4().hex[:8]}"
    var_dir.mkdir(parents=True, exist_ok=True)
    url: str | None = None
    if tier == "embedded":
        shutil.copyfile(template, var_dir / DB_FILE)
        settings = sqlite_database(str(var_dir / DB_FILE))
    else:
        import psycopg

        admin = services.services_database_url()
        name = f"fwtest_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(services._conninfo(admin), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        url = admin.rsplit("/", 1)[0] + f"/{name}"
        settings = database_from_url(url)
    _register(alias, settings)
    try:
        with blocker.unblock():
            yield TierDb(tier, alias, var_dir, url)
    finally:
        connections[alias].close()
        del connections[alias]
        del connections.settings[alias]
        if url:
            services.drop_database(services.services_database_url(), url.rsplit("/", 1)[1])


def cover_test_clock(db: TierDb, kinds: tuple[str, ...] = ("gpu", "node")) -> None:
    """PostgreSQL: partitions around the test clock T (the migration made them around the
    real now): six hours before it to one after, for the kinds these tests write."""
    if db.vendor != "postgresql":
        return
    spans = {f: (T - 6 * 3600, T + 3600) for f in families() if f.kind in kinds}
    ensure_between(django_runner(db.alias), spans)


@pytest.fixture
def db(
    tier: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, django_db_blocker: Any
) -> Iterator[TierDb]:
    with fresh_db(tier, tmp_path, tmp_path_factory, django_db_blocker) as fresh:
        cover_test_clock(fresh)
        yield fresh


# ---------------------------------------------------------------------------
# the known series and what the rollups must say about it

GPUS = [(1, 0), (1, 1), (2, 0)]
NODES = [(1,), (2,)]
GPU_METRICS = ("util_gpu_pct", "mem_total_mib", "energy_j", "pstate")
NODE_METRICS = ("cpu_pct", "temp_inlet_c")
METRICS_OF = {"gpu": GPU_METRICS, "node": NODE_METRICS}


def gpu_row(t: int, node: int, gpu: int) -> tuple[Any, ...]:
    entity = node * 10 + gpu
    util = float((t * 7 + 13 * entity) % 101)  # jumps around: min/max/last all differ
    slow = float(1000 + (t // 30) % 5 * 10 + entity) if t % 30 == 0 else None  # every 30 s
    energy = 1e6 + t % 100_000 * 300.0 + entity  # a counter, rising
    pstate = (t // 10 + entity) % 3  # an integer gauge
    return (float(t), node, gpu, util, slow, energy, pstate)


def node_row(t: int, node: int) -> tuple[Any, ...]:
    cpu = float((t * 3 + node) % 89) + 0.5
    inlet = 20.0 + (t // 20) % 7 + node if t % 20 == 0 else None  # every 20 s
    return (float(t), node, cpu, inlet)


def series(start: int, stop: int, every: int = 5) -> dict[str, list[tuple[Any, ...]]]:
    times = range(start, stop, every)
    return {
        "gpu": [gpu_row(t, n, g) for t in times for n, g in GPUS],
        "node": [node_row(t, n) for t in times for (n,) in NODES],
    }


def store_raw(db: TierDb, rows: dict[str, list[tuple[Any, ...]]]) -> None:
    for kind, kind_rows in rows.items():
        columns = ("ts", *ENTITY_COLUMNS[kind], *METRICS_OF[kind])
        db.insert(raw_table(kind), columns, kind_rows)


Stats = tuple[int, tuple[Any, ...]]  # n, then (min, mean, max, last) per metric


def expected(kind: str, rows: list[tuple[Any, ...]], step: int, before: int) -> dict[Any, Stats]:
    """What a rollup of `step` seconds must hold for buckets starting before `before`.

    Hour means are the minute means weighted by each minute's row count: exact
    for fields every sample carries, an approximation for slow fields.
    """
    nkeys = len(ENTITY_COLUMNS[kind])
    groups: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for row in rows:
        bucket = int(row[0]) // step * step
        if bucket < before:
            groups.setdefault((*row[1 : 1 + nkeys], bucket), []).append(row)
    out: dict[Any, Stats] = {}
    for key, members in groups.items():
        members.sort(key=lambda r: r[0])
        stats: list[Any] = []
        for i in range(len(METRICS_OF[kind])):
            values = [r[1 + nkeys + i] for r in members if r[1 + nkeys + i] is not None]
            mean = sum(values) / len(values) if step == 60 else _hour_mean(members, nkeys + 1 + i)
            stats += [min(values), pytest.approx(mean), max(values)]
            stats.append(values[-1])  # the newest sample that carries the field
        out[key] = (len(members), tuple(stats))
    return out


def _hour_mean(rows: list[tuple[Any, ...]], col: int) -> float:
    minutes: dict[int, list[tuple[Any, ...]]] = {}
    for row in rows:
        minutes.setdefault(int(row[0]) // 60, []).append(row)
    weighted = weight = 0.0
    for members in minutes.values():
        values = [r[col] for r in members if r[col] is not None]
        if values:
            weighted += sum(values) / len(values) * len(members)
            weight += len(members)
    return weighted / weight


def stored(db: TierDb, kind: str, tier: str) -> dict[Any, Stats]:
    keys = ENTITY_COLUMNS[kind]
    stats = [f"{m}_{s}" for m in METRICS_OF[kind] for s in ("min", "mean", "max", "last")]
    rows = db.execute(
        f"SELECT {', '.join((*keys, 'bucket', 'n', *stats))} FROM {rollup_table(kind, tier)}"
    )
    width = len(keys) + 1
    return {tuple(r[:width]): (r[width], tuple(r[width + 1 :])) for r in rows}


def roll(db: TierDb, now: float) -> None:
    for tier in ("1m", "1h"):
        for kind in METRICS_OF:
            rollup(tier, kind, now, using=db.alias)


def state(db: TierDb, tier: str, kind: str) -> tuple[int, int]:
    """(done_until, pending late marks) of a tier."""
    with connections[db.alias].cursor() as cur:
        found = read_state(cur, tier, kind)
    assert found is not None
    pending = db.execute(f"SELECT count(*) FROM {late_table(kind)} WHERE tier = %s", [tier])
    return found.done_until, int(pending[0][0])


def mark_late(db: TierDb, kind: str, tier: str, rows: Sequence[Sequence[Any]]) -> None:
    """What the ingest commit does for rows before the seal: one mark per (entity, bucket)
    of `tier` that the rows (raw rows: ts, entity…) fall in."""
    nkeys = len(ENTITY_COLUMNS[kind])
    step = 60 if tier == "1m" else 3600
    marks = {(*r[1 : 1 + nkeys], int(r[0]) // step * step) for r in rows}
    db.insert(
        late_table(kind),
        (*ENTITY_COLUMNS[kind], "tier", "bucket"),
        [(*m[:-1], tier, m[-1]) for m in sorted(marks)],
    )


# ---------------------------------------------------------------------------


def test_minute_rollups_hold_min_mean_max_and_last_of_the_raw_samples(db: TierDb) -> None:
    raw = series(T - 7200, T + 30)
    store_raw(db, raw)
    roll(db, T + 30)
    for kind in ("gpu", "node"):
        assert stored(db, kind, "1m") == expected(kind, raw[kind], 60, before=T)
    # last of a slow field comes from the newest sample that carries it
    assert db.execute(
        "SELECT mem_total_mib_last FROM fw_gpu_1m WHERE node_id = 1 AND gpu = 0 AND bucket = %s",
        [T - 60],
    ) == [(gpu_row(T - 30, 1, 0)[4],)]


def test_hour_rollups_agree_with_the_raw_samples(db: TierDb) -> None:
    raw = series(T - 7200, T + 30)
    store_raw(db, raw)
    roll(db, T + 30)
    for kind in ("gpu", "node"):
        hours = stored(db, kind, "1h")
        assert sorted({key[-1] for key in hours}) == [T - 7200, T - 3600]
        assert hours == expected(kind, raw[kind], 3600, before=T)


def test_a_minute_is_rolled_up_only_once_it_is_complete_and_past_the_grace(db: TierDb) -> None:
    raw = series(T - 120, T + 60)
    store_raw(db, raw)
    roll(db, T + 69)  # the minute starting at T ended 9 s ago: batches may still arrive
    assert {key[-1] for key in stored(db, "gpu", "1m")} == {T - 120, T - 60}
    roll(db, T + 71)
    assert stored(db, "gpu", "1m") == expected("gpu", raw["gpu"], 60, before=T + 60)
    assert state(db, "1m", "gpu") == (T + 60, 0)


def test_late_samples_marked_late_are_recomputed_in_both_tiers(db: TierDb) -> None:
    raw = series(T - 7200, T + 30)
    store_raw(db, raw)
    roll(db, T + 30)
    # An agent's spool arrives after a partition: samples in the oldest hour,
    # between the ones already stored, with a new last value for the slow field.
    late = series(T - 7000 + 2, T - 6500, every=5)
    late["gpu"] = [(*r[:4], 9999.0 if int(r[0]) % 60 == 52 else None, *r[5:]) for r in late["gpu"]]
    store_raw(db, late)
    # what the ingest commit does for rows before the 1m tier's seal
    for kind in ("gpu", "node"):
        mark_late(db, kind, "1m", late[kind])
    roll(db, T + 40)
    for kind in ("gpu", "node"):
        everything = raw[kind] + late[kind]
        assert stored(db, kind, "1m") == expected(kind, everything, 60, before=T)
        assert stored(db, kind, "1h") == expected(kind, everything, 3600, before=T)
        assert state(db, "1m", kind) == (T, 0)
        assert state(db, "1h", kind) == (T, 0)


def test_running_the_rollup_again_changes_nothing(db: TierDb) -> None:
    raw = series(T - 3600, T)
    store_raw(db, raw)
    roll(db, T + 30)
    before = stored(db, "gpu", "1m")
    # force a full recompute of what is already there
    mark_late(db, "gpu", "1m", raw["gpu"])
    roll(db, T + 30)
    assert stored(db, "gpu", "1m") == before
    assert len(before) == len(GPUS) * 60


def test_a_worker_holding_a_stale_state_cannot_claim_the_chunk(db: TierDb) -> None:
    store_raw(db, series(T - 600, T))
    rollup("1m", "gpu", T - 300, using=db.alias)
    with connections[db.alias].cursor() as cur:
        seen = read_state(cur, "1m", "gpu")
    assert seen is not None
    rollup("1m", "gpu", T + 30, using=db.alias)  # another worker got there first
    with connections[db.alias].cursor() as cur:
        assert not claim(cur, "1m", "gpu", seen)
        fresh = read_state(cur, "1m", "gpu")
        assert fresh is not None
        assert claim(cur, "1m", "gpu", fresh)


def test_a_resend_after_raw_retention_does_not_shrink_stored_minutes(db: TierDb) -> None:
    raw = series(T - 600, T)
    store_raw(db, raw)
    roll(db, T + 30)
    before = stored(db, "gpu", "1m")
    # Raw rows expire, then an agent resends part of an old batch (its ack was lost):
    # the recompute sees only the resent rows and must keep the fuller minute.
    db.execute("DELETE FROM fw_gpu_raw")
    resent = [r for r in raw["gpu"] if int(r[0]) % 60 < 20]
    store_raw(db, {"gpu": resent})
    mark_late(db, "gpu", "1m", resent)
    roll(db, T + 30)
    assert stored(db, "gpu", "1m") == before
