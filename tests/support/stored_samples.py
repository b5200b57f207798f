"""What a running server has stored of a kind's samples, raw rows and packed spans together
(fleet/storage/packed.py moves sealed spans out of the raw table while a test runs, when
its clock crosses a span's end): for tests that count stored samples through SQL."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fleet.storage.packed import decode
from fleet.storage.schema import packed_table, raw_table

Query = Callable[..., list[tuple[Any, ...]]]  # (sql with ? marks, params) -> rows


def sample_times(query: Query, kind: str, where: str, params: Sequence[Any] = ()) -> set[float]:
    """Distinct sample times of the `kind` rows matching `where` (on entity columns), in
    the raw table and in packed spans."""
    times = {
        float(r[0]) for r in query(f"SELECT ts FROM {raw_table(kind)} WHERE {where}", tuple(params))
    }
    for (data,) in query(f"SELECT data FROM {packed_table(kind)} WHERE {where}", tuple(params)):
        times.update(float(s[0]) for s in decode(kind, data))
    return times


def count_samples(query: Query, kind: str) -> int:
    """Samples of `kind` stored: raw rows plus packed spans' samples."""
    rows = query(
        f"SELECT (SELECT count(*) FROM {raw_table(kind)})"
        f" + (SELECT coalesce(sum(n), 0) FROM {packed_table(kind)})"
    )
    return int(rows[0][0])
