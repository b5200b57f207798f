"""A PostgreSQL restart as a server sees it, for one test database only: every session
is terminated (SQLSTATE 57P01, as at shutdown) and new connections are refused until
it is over. Other databases on the cluster, and other tests, are not touched."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tests.support import services


def _admin(sql: str, params: tuple[object, ...] = ()) -> None:
    import psycopg

    with psycopg.connect(
        services._conninfo(services.services_database_url()), autocommit=True
    ) as conn:
        conn.execute(sql, params)  # type: ignore[arg-type]


@contextlib.contextmanager
def database_down(name: str) -> Iterator[None]:
    _admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
    try:
        _admin(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        yield
    finally:
        _admin(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
