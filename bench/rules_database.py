"""The throwaway database of bench/rules.py and of the benches built on its inventory: a
fresh SQLite file, or a new PostgreSQL database with a Redis index of its own, this
process's Django pointed at it and migrated, all of it dropped when the bench is done."""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support import services
from tests.support.server import FleetServer

REDIS_KEYS = ("celery", "rules", "unacked", "unacked_index", "unacked_mutex")


@dataclass
class BenchDb:
    kind: str
    var_dir: Path
    env: dict[str, str]
    pg_name: str | None = None
    redis_url: str | None = None
    admin_url: str | None = None  # read before this process's DATABASE_URL is the bench's


def make_database(kind: str, var_dir: Path, eval_interval: float, redis_db: int) -> BenchDb:
    """A fresh database (SQLite file, or a new PostgreSQL database with a Redis broker
    on a database index of our own) and the environment every process of the bench uses."""
    extra = {"FLEETWATCH_ALERT_EVAL_S": f"{eval_interval:g}", "LOG_LEVEL": "INFO"}
    if kind == "sqlite":
        env = FleetServer(var_dir, extra_env=extra).env()
        return BenchDb(kind, var_dir, env)
    admin = services.services_database_url()
    name = f"fwbench_{uuid.uuid4().hex[:8]}"
    url = services.create_database(admin, name)
    # Beat's routes are fixed ("rules", "celery"): a Redis index of our own keeps other
    # workers on the shared Redis (tests, the demo) from taking the bench's messages.
    redis_url = f"{services.services_redis_url().rsplit('/', 1)[0]}/{redis_db}"
    env = FleetServer(var_dir, database_url=url, redis_url=redis_url, extra_env=extra).env()
    return BenchDb(kind, var_dir, env, name, redis_url, admin)


@contextlib.contextmanager
def bench_database(
    kind: str, prefix: str, eval_interval: float = 10.0, redis_db: int = 12
) -> Iterator[BenchDb]:
    """`make_database`'s database in a temporary folder named `prefix`…: dropped (its
    Redis keys deleted) and the folder removed however we leave."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        db = make_database(kind, Path(tmp), eval_interval, redis_db)
        try:
            yield db
        finally:
            drop_database(db)


def setup_django(db: BenchDb) -> None:
    """Point this process at the bench database, then migrate from scratch."""
    for key in ("DATABASE_URL", "REDIS_URL"):
        os.environ.pop(key, None)  # env() leaves them out for SQLite; so must we
    os.environ.update(db.env)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def drop_database(db: BenchDb) -> None:
    from django.db import connections

    connections.close_all()
    try:
        if db.pg_name and db.admin_url:
            services.drop_database(db.admin_url, db.pg_name)
    finally:
        if db.redis_url:
            import redis

            client = redis.Redis.from_url(db.redis_url)
            client.delete(*REDIS_KEYS, *client.keys("_kombu.*"))
