"""The NVLink signals (fleet/alerts/signals.py, `nvlink:<what>`): how fast each GPU's NVLink
error totals rose over its last 5–10 minutes, judged against DCGM's limits
(fleet/health/fabric.py).

The latest state holds one value per GPU; the base is the 1-minute rollup's last value
(`<metric>_last`) in the oldest bucket between 10 and 5 minutes ago. Set-based and cheap: a
GPU whose totals are all 0 now has had no NVLink error since its counters were reset, so
its figure is 0 with no history read; only GPUs with a non-zero total are looked up, in one
query of that 5-minute bucket range (the tier's `bucket` index) for all of them. A GPU whose
totals were last read more than NVLINK_STALE_S ago, or that reports none (no NVLink), has
no value; so has one with a non-zero total and no rollup 5 minutes back yet. The rate is
measured from the bucket's start, so it is never overstated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import connection

from fleet.health import fabric as judge
from fleet.health.fabric import NVLINK_COUNTERS, NVLINK_CRC, NVLINK_LINK_ERRORS
from fleet.storage.schema import rollup_table

if TYPE_CHECKING:
    from fleet.alerts.evaluate_state import Key, Snapshot, Values

__all__ = ("NVLINK_DERIVED",)

_CHUNK = 500  # node ids per IN list


@dataclass(frozen=True, slots=True)
class Figures:
    crc_per_s: float | None
    link_errors: float | None


def _figures(snap: Snapshot) -> dict[Key, Figures]:
    def make() -> dict[Key, Figures]:
        # Every GPU passes through here each evaluation: plain lookups, no per-GPU dicts
        # for the GPUs (nearly all) whose totals are 0 or absent.
        now, stale = snap.now, judge.NVLINK_STALE_S
        crc_name, (replay_name, recovery_name) = NVLINK_CRC, NVLINK_LINK_ERRORS
        out: dict[Key, Figures] = {}
        rising: dict[Key, tuple[float, dict[str, float]]] = {}
        for key, reading in snap.readings("gpu").items():
            values = reading.values
            crc, replay, recovery = (
                values.get(crc_name),
                values.get(replay_name),
                values.get(recovery_name),
            )
            if crc is None and replay is None and recovery is None:
                continue  # no NVLink
            times = reading.ts
            newest = max(times.get(n, 0.0) for n in NVLINK_COUNTERS)
            if now - newest > stale:
                continue
            if not (crc or replay or recovery):
                links = replay is not None or recovery is not None
                out[key] = _ZERO if crc is not None and links else _zero(crc, links)
                continue
            totals = {n: float(values[n]) for n in NVLINK_COUNTERS if n in values}
            rising[key] = (newest, totals)
        bases = _bases(sorted({key[0] for key in rising}), now)
        for key, (ts, totals) in rising.items():
            base = bases.get(key)
            out[key] = _NONE if base is None else _judged(base, ts, totals)
        return out

    return snap.cached("nvlink", make)  # type: ignore[no-any-return]


_ZERO, _NONE = Figures(0.0, 0.0), Figures(None, None)


def _zero(crc: float | None, links: bool) -> Figures:
    """All 0, some totals absent: a figure for those present only."""
    return Figures(0.0 if crc is not None else None, 0.0 if links else None)


def _judged(base: tuple[float, dict[str, float]], ts: float, totals: dict[str, float]) -> Figures:
    since, then = base
    span = ts - since
    if span < 60:
        return _NONE
    crc = None
    if NVLINK_CRC in totals:
        crc = judge.rise(then.get(NVLINK_CRC), totals[NVLINK_CRC]) / span
    present = [n for n in NVLINK_LINK_ERRORS if n in totals]
    errors = sum(judge.rise(then.get(n), totals[n]) for n in present) if present else None
    return Figures(crc, errors)


def _bases(node_ids: list[int], now: float) -> dict[Key, tuple[float, dict[str, float]]]:
    """Per GPU of these nodes, the oldest 1-minute bucket between 2 × RATE_WINDOW_S and
    RATE_WINDOW_S ago that holds an NVLink total: (its start, the totals' last values)."""
    if not node_ids:
        return {}
    lasts = [f"{n}_last" for n in NVLINK_COUNTERS]
    lo, hi = int(now - 2 * judge.RATE_WINDOW_S), int(now - judge.RATE_WINDOW_S)
    found: dict[Key, tuple[float, dict[str, float]]] = {}
    with connection.cursor() as cur:
        for i in range(0, len(node_ids), _CHUNK):
            chunk = node_ids[i : i + _CHUNK]
            marks = ",".join(["%s"] * len(chunk))
            cur.execute(
                f"SELECT node_id, gpu, bucket, {', '.join(lasts)} FROM {rollup_table('gpu', '1m')}"
                f" WHERE bucket >= %s AND bucket <= %s AND node_id IN ({marks})"
                " ORDER BY bucket",
                [lo, hi, *chunk],
            )
            for node_id, gpu, bucket, *values in cur.fetchall():
                key = (int(node_id), int(gpu))
                then = {
                    n: float(v)
                    for n, v in zip(NVLINK_COUNTERS, values, strict=True)
                    if v is not None
                }
                if then and key not in found:
                    found[key] = (float(bucket), then)
    return found


def _crc_per_s(snap: Snapshot) -> Values:
    return {key: f.crc_per_s for key, f in _figures(snap).items()}


def _link_errors(snap: Snapshot) -> Values:
    return {key: f.link_errors for key, f in _figures(snap).items()}


NVLINK_DERIVED: dict[tuple[str, str], Callable[[Snapshot], Values]] = {
    ("gpu", "nvlink_crc_errors_per_s"): _crc_per_s,
    ("gpu", "nvlink_link_errors"): _link_errors,
}
