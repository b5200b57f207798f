"""Writing latest-state rows in a Django test, through the real merge (`merge_latest`)."""

from __future__ import annotations

from typing import Any

from django.db import connection

from fleet.storage.db import Row, Upsert
from fleet.storage.latest import LatestDelta, merge_latest


class DjangoTx:
    """merge_latest over the test database's Django connection."""

    vendor = connection.vendor

    def upsert(self, spec: Upsert, rows: list[Row]) -> None:
        cols, marks = ",".join(spec.columns), ",".join(["%s"] * len(spec.columns))
        sql = (
            f"INSERT INTO {spec.table} ({cols}) VALUES ({marks})"
            f" ON CONFLICT ({','.join(spec.keys)}) DO UPDATE SET {spec.set_clause}"
        )
        with connection.cursor() as cur:
            cur.executemany(sql, rows)


def store_latest(kind: str, key: tuple[int, ...], at: float, **values: Any) -> None:
    """One sample of `kind` for `key` at `at`, merged into the latest state."""
    delta = LatestDelta()
    delta.add(kind, key, {"ts": at, **values}, at)
    merge_latest(DjangoTx(), delta)  # type: ignore[arg-type]
