"""One pass at a time, whichever worker runs it: a PostgreSQL session advisory lock held for
the pass. The packer (fleet.storage.packed) and the remote-write shipper
(fleet.remote_write.ship) use it, each with its own key."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

from fleet.storage.dialect import POSTGRESQL


@contextlib.contextmanager
def single_flight(key: int, using: str = DEFAULT_DB_ALIAS) -> Iterator[bool]:
    """PostgreSQL: hold the session advisory lock `key` for the block (released at its end,
    or by the server if the worker dies); False when another session holds it. SQLite (the
    embedded tier: one maintenance worker process, one writer): always True."""
    conn = connections[using]
    if conn.vendor != POSTGRESQL:
        yield True
        return
    with conn.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(%s)", [key])
        got = bool(cur.fetchone()[0])
    try:
        yield got
    finally:
        if got:
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT pg_advisory_unlock(%s)", [key])
            except DatabaseError:
                pass  # the connection is gone, and the server released its locks with it
