"""A fresh migrated database per test, on either tier: a SQLite file (embedded) or a
PostgreSQL database (services), cloned from a template migrated once per session and
reachable in-process through a Django connection alias of its own.

`T` is the fixed test clock these databases are prepared around."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.db import connections, transaction

from fleet.storage.db import open_db
from fleet.storage.latest import LatestDelta
from fleet.storage.partitions import django_runner, ensure_between, families
from fleet.storage.samples import SampleWrite, write_samples
from fleetwatch.env import database_from_url, sqlite_database
from tests.support import services
from tests.support.server import SQLITE_FILE, FleetServer

ROOT = Path(__file__).resolve().parents[2]
T = 1_800_000_000  # an hour boundary: buckets line up with round numbers
DB_FILE = SQLITE_FILE  # the embedded tier's file, as the servers name it


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

    def store(self, kind: str, key: tuple[int, ...], at: float, **values: Any) -> None:
        """One sample of `kind` for `key` taken and received at `at`, stored as the ingest
        pipeline stores an agent's batch: raw row, late marks and latest state in one
        transaction (`write_samples`), from a storage connection of its own."""
        sample = {"ts": at, **values}
        write = SampleWrite()
        write.add_samples(kind, [(key, sample)])
        latest = LatestDelta()
        latest.add(kind, key, sample, at)
        storage = open_db(dict(connections.settings[self.alias]))
        try:
            write_samples(storage, write, latest)
        finally:
            storage.close()

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


def register_alias(alias: str, db: dict[str, Any]) -> None:
    """Make `db` (Django DATABASES settings) reachable as connections[alias]."""
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
    register_alias(alias, settings)
    try:
        with blocker.unblock():
            yield TierDb(tier, alias, var_dir, url)
    finally:
        connections[alias].close()
        del connections[alias]
        del connections.settings[alias]
        if url:
            services.drop_database(services.services_database_url(), url.rsplit("/", 1)[1])


def cover_test_clock(
    db: TierDb,
    kinds: tuple[str, ...] = ("gpu", "node"),
    behind: Mapping[str, float] | None = None,
) -> None:
    """PostgreSQL: partitions around the test clock T (the migration made them around the
    real now), for the kinds these tests write: from `behind[tier]` seconds before it (else
    six hours) to an hour after."""
    if db.vendor != "postgresql":
        return
    spans = {
        f: (T - (behind or {}).get(f.tier, 6 * 3600), T + 3600)
        for f in families()
        if f.kind in kinds
    }
    ensure_between(django_runner(db.alias), spans)


# Fixtures: a module binds the one it needs to the name its tests take, e.g.
# `db = databases.fresh_tier_db`.


@pytest.fixture
def fresh_tier_db(
    tier: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, django_db_blocker: Any
) -> Iterator[TierDb]:
    """A fresh migrated database for one test, on the test's tier."""
    with fresh_db(tier, tmp_path, tmp_path_factory, django_db_blocker) as fresh:
        yield fresh


@pytest.fixture
def fresh_postgres_db(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, django_db_blocker: Any
) -> Iterator[TierDb]:
    """A fresh migrated PostgreSQL database for one test, whatever the test's tier (for
    modules of PostgreSQL-only behaviour, marked `services`)."""
    with fresh_db("services", tmp_path, tmp_path_factory, django_db_blocker) as fresh:
        yield fresh


@pytest.fixture
def fresh_db_at_test_clock(
    tier: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, django_db_blocker: Any
) -> Iterator[TierDb]:
    """`fresh_tier_db`, with partitions around the test clock T for GPU and node rows."""
    with fresh_db(tier, tmp_path, tmp_path_factory, django_db_blocker) as fresh:
        cover_test_clock(fresh)
        yield fresh


@pytest.fixture
def unmigrated_server(tier: str, tmp_path: Path) -> Iterator[FleetServer]:
    """A server of the test's own, not started, on an empty database (PostgreSQL: one of its
    own, dropped afterwards): for tests that migrate step by step."""
    name = url = None
    if tier == "services":
        name = f"fwtest_{uuid.uuid4().hex[:10]}"
        url = services.create_database(services.services_database_url(), name)
    try:
        yield FleetServer(tmp_path, database_url=url)
    finally:
        if name:
            services.drop_database(services.services_database_url(), name)
