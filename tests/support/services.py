"""Where PostgreSQL and Redis are, and whether they answer (the production tier)."""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def services_database_url() -> str:
    """An admin connection: each test server creates (and drops) a database of its own."""
    return (
        os.environ.get("FLEETWATCH_TEST_DATABASE_URL")
        or os.environ.get("DATABASE_URL")
        or DEFAULT_DATABASE_URL
    )


def services_redis_url() -> str:
    return (
        os.environ.get("FLEETWATCH_TEST_REDIS_URL")
        or os.environ.get("REDIS_URL")
        or DEFAULT_REDIS_URL
    )


def answers(url: str, timeout: float = 1.0) -> bool:
    parts = urlsplit(url)
    port = parts.port or (5432 if parts.scheme.startswith("postgres") else 6379)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def postgres_answers() -> bool:
    if not answers(services_database_url()):
        return False
    try:
        import psycopg

        with psycopg.connect(_conninfo(services_database_url()), connect_timeout=2):
            return True
    except Exception:
        return False


def redis_answers() -> bool:
    return answers(services_redis_url())


def _conninfo(url: str) -> str:
    from fleet.storage.db import pg_conninfo
    from fleetwatch.env import database_from_url

    return pg_conninfo(database_from_url(url))


def create_database(admin_url: str, name: str, template: str | None = None) -> str:
    """Create a PostgreSQL database, empty or a copy of `template`; return its URL."""
    import psycopg

    copy_of = f' TEMPLATE "{template}"' if template else ""
    with psycopg.connect(_conninfo(admin_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"{copy_of}')
    parts = urlsplit(admin_url)
    return parts._replace(path=f"/{name}").geturl()


def drop_database(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(_conninfo(admin_url), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


CLAIM_KEY = "fwtest:redis-claim"


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """The shared Redis at a database number nobody else uses (empty), claimed with a key
    and flushed afterwards: every queue, channel group and key of the app is the test's own,
    even while other test processes use the same Redis."""
    import redis

    parts = urlsplit(services_redis_url())
    for db in range(15, 0, -1):
        url = parts._replace(path=f"/{db}").geturl()
        client = redis.Redis.from_url(url)
        try:
            if client.dbsize() == 0 and client.set(CLAIM_KEY, uuid.uuid4().hex, nx=True):
                break
        finally:
            client.close()
    else:
        raise RuntimeError(f"no empty Redis database at {parts.geturl()} (1–15 are all in use)")
    try:
        yield url
    finally:
        client = redis.Redis.from_url(url)
        try:
            client.flushdb()
        finally:
            client.close()
