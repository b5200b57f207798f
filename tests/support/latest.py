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
    _merge(kind, key, sampled=at, received=at, values=values)


def store(kind: str, key: tuple[int, ...], now: float, **values: Any) -> None:
    """One sample of `kind` for `key` taken a second before `now` and received at `now`
    (an agent's usual lag), merged into the latest state."""
    _merge(kind, key, sampled=now - 1, received=now, values=values)


def _merge(
    kind: str, key: tuple[int, ...], *, sampled: float, received: float, values: dict[str, Any]
) -> None:
    delta = LatestDelta()
    delta.add(kind, key, {"ts": sampled, **values}, received)
    merge_latest(DjangoTx(), delta)  # type: ignore[arg-type]
