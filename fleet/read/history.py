"""Reading history: the one place every page, chart and the history API read time series.

`history(kind, key, metrics, start, end, max_points)` picks the storage tier that fits the
range (docs/storage.md): raw samples for short ranges still inside raw retention (up to an
hour on PostgreSQL, 15 minutes on SQLite: `RAW_MAX_RANGE_S`), 1-minute rollups inside
theirs, 1-hour rollups beyond; it says which tier answered. With a TSDB configured
(`FLEETWATCH_REMOTE_READ_URL`), a range older than raw retention is read from there
(fleet/read/history_remote.py: tier "tsdb"). What the rollup has not reached
yet (the last minute or two) is read from the next finer tier, so a chart ends at the last
sample. Every metric comes from one statement per tier read, grouped in the database into
at most `max_points` buckets (a bucket's mean, with its min and max), so a long range never
ships more points than a chart can draw. Raw SQL through Django's connection, one code path for
SQLite and PostgreSQL (only the raw bucket expression differs, `dialect.bucket_expr`).

`reason_spans` reads the clock-event (throttle) bitmask the same way but keeps it a mask:
averaging bits is meaningless, so each bucket ORs the masks it saw (raw: every sample;
rollups: the bucket's min, max and last, each a mask the GPU really reported) and runs of
identical masks become spans.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

from agents.protocol.metrics import METRICS
from fleet.storage import packed_read
from fleet.storage.dialect import POSTGRESQL, SQLITE, bucket_expr
from fleet.storage.retention import kept_s
from fleet.storage.schema import ENTITY_COLUMNS, TIER_SECONDS, raw_table, rollup_table

__all__ = (
    "DEFAULT_MAX_POINTS",
    "MAX_POINTS",
    "RANGES",
    "History",
    "HistoryError",
    "ReasonSpan",
    "Series",
    "choose_tier",
    "entity_site_id",
    "history",
    "reason_spans",
)

# Raw rows of one entity arrive about once a second: past an hour a chart would get
# thousands of them, and the 1-minute tier says the same in a sixtieth of the rows.
# SQLite's raw key is time first (docs/storage.md), so one GPU's hour scans every GPU's
# rows of that hour: measured 0.85-1.0 s for 512 GPUs at 1 Hz, 0.08 s for 15 minutes.
# PostgreSQL's key is entity first: an hour of one GPU is an index range.
RAW_MAX_RANGE_S: dict[str, float] = {POSTGRESQL: 3600.0, SQLITE: 900.0}
FINER = {"1m": "raw", "1h": "1m"}
DEFAULT_MAX_POINTS = 600  # about one per pixel column of a chart
MAX_POINTS = 5000
RANGES: dict[str, float] = {"1h": 3600.0, "24h": 86400.0, "7d": 7 * 86400.0, "30d": 30 * 86400.0}
MASK_METRIC = "clock_event_reasons"
# A span of one mask goes on across empty buckets (samples sparser than the bucket width)
# until the data stops for longer than the freshness target: then it is "no data".
SPAN_GAP_S = 30.0


Segment = tuple[str, float, float]  # (tier, from, to): rows of that tier in [from, to)


class HistoryError(ValueError):
    """A request history cannot answer, naming the input at fault."""

    def __init__(self, field_name: str, reason: str) -> None:
        super().__init__(f"{field_name}: {reason}")
        self.field = field_name
        self.reason = reason


@dataclass(frozen=True)
class Series:
    """One metric over the range: per bucket (its start, epoch s) the mean, min and max;
    None where the entity sent rows but not this field (unsupported is not zero)."""

    metric: str
    points: list[tuple[float, float | None]]  # (bucket start, mean)
    min: list[float | None]
    max: list[float | None]


@dataclass(frozen=True)
class History:
    kind: str
    key: tuple[int, ...]
    tier: str  # "raw", "1m" or "1h": the table that answered
    step_s: int  # bucket width of the points
    start: float
    end: float
    series: dict[str, Series] = field(default_factory=dict)
    parts: list[Segment] = field(default_factory=list)  # which tier answered which stretch
    note: str = ""  # a source that should have answered and did not (history_remote.py)

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "key": dict(zip(ENTITY_COLUMNS[self.kind], self.key, strict=True)),
            "tier": self.tier,
            "step_s": self.step_s,
            "start": self.start,
            "end": self.end,
            "series": {
                name: {"points": s.points, "min": s.min, "max": s.max}
                for name, s in self.series.items()
            },
            "parts": [{"tier": t, "start": a, "end": b} for t, a, b in self.parts],
            "note": self.note,
        }


@dataclass(frozen=True)
class ReasonSpan:
    start: float
    end: float  # the end of the last bucket in the span
    mask: int


# -- validation ----------------------------------------------------------------------------


def _retention_s(kind: str) -> dict[str, float]:
    return {tier: kept_s(tier, kind) for tier in ("raw", "1m", "1h")}


def max_range_s(kind: str = "gpu") -> float:
    """The longest range any tier of `kind` keeps: its 1-hour rollups' retention
    (facility, loop, rack and feed hours are kept longer than GPU hours)."""
    return _retention_s(kind)["1h"]


def _check_kind(kind: str) -> None:
    if kind not in METRICS:
        raise HistoryError("kind", f"unknown kind {kind!r}; one of {', '.join(METRICS)}")


def _check_metrics(kind: str, metrics: Sequence[str]) -> None:
    if not metrics:
        raise HistoryError("metric", "name at least one metric")
    known = {m.name for m in METRICS[kind]}
    for name in metrics:
        if name not in known:
            raise HistoryError("metric", f"{name!r} is not a {kind} metric")


def _check_key(kind: str, key: Sequence[int]) -> tuple[int, ...]:
    columns = ENTITY_COLUMNS[kind]
    if len(key) != len(columns):
        raise HistoryError("key", f"a {kind} is named by {', '.join(columns)}")
    return tuple(int(k) for k in key)


def _check_range(start: float, end: float, max_points: int, kind: str) -> None:
    if not (math.isfinite(start) and math.isfinite(end)):
        raise HistoryError("start", "start and end must be finite epoch seconds")
    if start >= end:
        raise HistoryError("start", "start must be before end")
    if end - start > max_range_s(kind):
        days = max_range_s(kind) / 86400
        raise HistoryError("range", f"at most {days:.0f} days (the 1-hour rollups' retention)")
    if not 2 <= max_points <= MAX_POINTS:
        raise HistoryError("max_points", f"between 2 and {MAX_POINTS}")


# -- tier and bucket choice ----------------------------------------------------------------


def choose_tier(
    start: float, end: float, now: float, vendor: str = POSTGRESQL, kind: str = "gpu"
) -> str:
    """The finest tier that still holds `start` and is worth reading for this range."""
    kept = _retention_s(kind)
    if end - start <= RAW_MAX_RANGE_S.get(vendor, 900.0) and start >= now - kept["raw"]:
        return "raw"
    if start >= now - kept["1m"]:
        return "1m"
    return "1h"


def bucket_step(tier: str, start: float, end: float, max_points: int) -> int:
    """The bucket width: the tier's own, widened (in whole tier steps) until the range
    fits in `max_points` buckets, however the range lines up with bucket edges."""
    unit = 1 if tier == "raw" else TIER_SECONDS[tier]
    needed = math.ceil((end - start) / (max_points - 1))
    return max(unit, unit * math.ceil(needed / unit))


# -- reading -------------------------------------------------------------------------------


def _key_clause(kind: str) -> str:
    return " AND ".join(f"{column} = %s" for column in ENTITY_COLUMNS[kind])


def _done_until(tier: str, kind: str, using: str) -> float | None:
    rows = _select(
        "SELECT done_until FROM fw_rollup_state WHERE tier = %s AND kind = %s", [tier, kind], using
    )
    return float(rows[0][0]) if rows else None


def plan(kind: str, tier: str, start: float, end: float, step: int, using: str) -> list[Segment]:
    """Where each part of the range is read from: the chosen tier up to where its rollup
    has got to (cut at a display-bucket edge, so no bucket is split between tiers), the
    rest from the next finer tier, and so on down to raw. A chart of the last day so
    reaches the last sample, not the last minute the rollup finished."""
    if tier == "raw":
        return [("raw", start, end)]
    done = _done_until(tier, kind, using)
    cut = -math.inf if done is None else math.floor(done / step) * step
    segments: list[Segment] = []
    if cut > start:
        segments.append((tier, start, min(end, cut)))
    if cut < end:
        segments += plan(kind, FINER[tier], max(start, cut), end, step, using)
    return segments


def _series_sql(
    kind: str, tier: str, metrics: Sequence[str], step: int, vendor: str, raw: str = ""
) -> str:
    """`raw`: what raw rows are read from (the raw table, or it and packed spans as one:
    fleet.storage.packed_read)."""
    if tier == "raw":
        table, bucket = raw or raw_table(kind), bucket_expr(vendor, step)
        time_col = "ts"
        stats = [f"AVG({m}), MIN({m}), MAX({m})" for m in metrics]
    else:
        table, bucket = rollup_table(kind, tier), f"(bucket / {step}) * {step}"
        time_col = "bucket"
        # A wider bucket than the tier's: the minutes' means weighted by their row count,
        # as the 1-hour rollup itself does (docs/storage.md).
        stats = [
            f"SUM({m}_mean * n) / SUM(CASE WHEN {m}_mean IS NOT NULL THEN n END),"
            f" MIN({m}_min), MAX({m}_max)"
            for m in metrics
        ]
    return (
        f"SELECT {bucket} AS b, {', '.join(stats)} FROM {table}"
        f" WHERE {_key_clause(kind)} AND {time_col} >= %s AND {time_col} < %s"
        " GROUP BY b ORDER BY b"
    )


def _select(sql: str, params: Sequence[Any], using: str) -> list[tuple[Any, ...]]:
    with connections[using].cursor() as cur:
        cur.execute(sql, list(params))
        return list(cur.fetchall())


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _time_bounds(tier: str, start: float, end: float) -> tuple[float, float]:
    """Rollup buckets are labelled by their start: take the one `start` falls in."""
    if tier == "raw":
        return start, end
    step = TIER_SECONDS[tier]
    return float(math.floor(start / step) * step), end


def history(
    kind: str,
    key: Sequence[int],
    metrics: Sequence[str],
    start: float,
    end: float,
    max_points: int = DEFAULT_MAX_POINTS,
    *,
    now: float,
    using: str = DEFAULT_DB_ALIAS,
) -> History:
    """`metrics` of one entity of `kind` from `start` to `end` (epoch seconds), at most
    `max_points` points per metric, from the tier that fits. Raises HistoryError."""
    _check_kind(kind)
    _check_metrics(kind, metrics)
    entity = _check_key(kind, key)
    _check_range(start, end, max_points, kind)
    names = list(dict.fromkeys(metrics))
    # Older than raw retention, with a TSDB configured: its raw samples (history_remote).
    from fleet.read import history_remote  # builds on this module's types

    remote = history_remote.from_tsdb(
        kind, entity, names, start, end, max_points, now=now, using=using
    )
    if remote.history is not None:
        return remote.history
    vendor = connections[using].vendor
    tier = choose_tier(start, end, now, vendor, kind)
    step = bucket_step(tier, start, end, max_points)
    rows: list[tuple[Any, ...]] = []
    parts = plan(kind, tier, start, end, step, using)
    for part, since, until in parts:
        bounds = _time_bounds(part, since, until)
        if part == "raw":
            rows += _select_raw(
                kind, entity, bounds, partial(_series_sql, kind, part, names, step, vendor), using
            )
            continue
        sql = _series_sql(kind, part, names, step, vendor)
        rows += _select(sql, [*entity, *bounds], using)
    series = {}
    for i, name in enumerate(names):
        col = 1 + 3 * i
        series[name] = Series(
            metric=name,
            points=[(float(r[0]), _number(r[col])) for r in rows],
            min=[_number(r[col + 1]) for r in rows],
            max=[_number(r[col + 2]) for r in rows],
        )
    return History(kind, entity, tier, step, start, end, series, parts, remote.note)


def _select_raw(
    kind: str,
    entity: tuple[int, ...],
    bounds: tuple[float, float],
    sql: Callable[[str], str],
    using: str,
) -> list[tuple[Any, ...]]:
    """Raw rows of one entity in [bounds), from the raw table and any packed spans."""
    with connections[using].cursor() as cur:
        return packed_read.read_entity(cur, kind, entity, *bounds, sql, [*entity, *bounds])


def _mask_sql(tier: str, raw: str = "") -> str:
    key = _key_clause("gpu")
    if tier == "raw":
        return (
            f"SELECT ts, {MASK_METRIC} FROM {raw or raw_table('gpu')} WHERE {key}"
            f" AND ts >= %s AND ts < %s AND {MASK_METRIC} IS NOT NULL ORDER BY ts"
        )
    m = MASK_METRIC
    return (
        f"SELECT bucket, {m}_min, {m}_max, {m}_last FROM {rollup_table('gpu', tier)}"
        f" WHERE {key} AND bucket >= %s AND bucket < %s AND {m}_last IS NOT NULL"
        " ORDER BY bucket"
    )


def _mask_rows(
    tier: str, key: tuple[int, int], start: float, end: float, step: int, using: str
) -> list[tuple[int, int]]:
    """(bucket start, OR of the masks seen in it), oldest first."""
    buckets: dict[int, int] = {}
    for part, since, until in plan("gpu", tier, start, end, step, using):
        bounds = _time_bounds(part, since, until)
        if part == "raw":
            found = _select_raw("gpu", key, bounds, partial(_mask_sql, part), using)
        else:
            found = _select(_mask_sql(part), [*key, *bounds], using)
        for row in found:
            b = int(row[0] // step) * step
            for mask in row[1:]:
                if mask is not None:
                    buckets[b] = buckets.get(b, 0) | int(mask)
    return sorted(buckets.items())


def reason_spans(
    key: Sequence[int],
    start: float,
    end: float,
    max_points: int = DEFAULT_MAX_POINTS,
    *,
    now: float,
    using: str = DEFAULT_DB_ALIAS,
) -> tuple[str, list[ReasonSpan]]:
    """A GPU's clock-event masks over the range as spans of equal masks (a gap in the data
    longer than SPAN_GAP_S ends a span), with the tier that answered. Rollup tiers give
    the reasons seen at least in each bucket (its min, max and last masks), not every
    sample's."""
    entity = _check_key("gpu", key)
    _check_range(start, end, max_points, "gpu")
    tier = choose_tier(start, end, now, connections[using].vendor, "gpu")
    step = bucket_step(tier, start, end, max_points)
    spans: list[ReasonSpan] = []
    for bucket, mask in _mask_rows(tier, (entity[0], entity[1]), start, end, step, using):
        last = spans[-1] if spans else None
        if last is not None and last.mask == mask and bucket - last.end <= SPAN_GAP_S:
            spans[-1] = ReasonSpan(last.start, bucket + step, mask)
        else:
            spans.append(ReasonSpan(float(bucket), float(bucket + step), mask))
    return tier, spans


# -- who may see it ------------------------------------------------------------------------

_SITE_OF: dict[str, str] = {
    "gpu": "SELECT h.site_id FROM fleet_node n JOIN fleet_rack r ON r.id = n.rack_id"
    " JOIN fleet_hall h ON h.id = r.hall_id WHERE n.id = %s",
    "node": "SELECT h.site_id FROM fleet_node n JOIN fleet_rack r ON r.id = n.rack_id"
    " JOIN fleet_hall h ON h.id = r.hall_id WHERE n.id = %s",
    "rack": "SELECT h.site_id FROM fleet_rack r JOIN fleet_hall h ON h.id = r.hall_id"
    " WHERE r.id = %s",
    "feed": "SELECT h.site_id FROM fleet_powerfeed f JOIN fleet_rack r ON r.id = f.rack_id"
    " JOIN fleet_hall h ON h.id = r.hall_id WHERE f.id = %s",
    "loop": "SELECT site_id FROM fleet_coolingloop WHERE id = %s",
    "facility": "SELECT id FROM fleet_site WHERE id = %s",
}


def entity_site_id(kind: str, key: Sequence[int], using: str = DEFAULT_DB_ALIAS) -> int | None:
    """The site an entity belongs to (access is decided per site), None if it does not
    exist. A GPU is judged by its node: history may outlive the GPU's inventory row."""
    _check_kind(kind)
    rows = _select(_SITE_OF[kind], [int(key[0])], using)
    return int(rows[0][0]) if rows else None
