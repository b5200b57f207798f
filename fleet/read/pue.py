"""Rolling PUE from energy, read from the facility rollups.

PUE is total facility energy over IT energy (The Green Grid; ISO/IEC 30134-2), not the
average of instantaneous ratios: an hour at 2 MW weighs twice an hour at 1 MW. Each
rollup bucket holds the mean power over its span, so a bucket's energy is its mean × its
length, and over a window PUE = Σ facility energy / Σ IT energy. Only buckets where both
meters reported count, so a gap in one meter does not skew the ratio; how much of the
window those buckets cover is said with the figure, because history is kept only so long
(settings.RETENTION_1M_HOURS for the 1-minute means; RETENTION_FACILITY_1H_HOURS, 400 days
by default, for the hourly ones, so a year fits).

The 12-month window is the annual PUE ISO/IEC 30134-2 reports: it counts as a full window
only once history reaches back to its start (a year of data), never from a shorter span
scaled up; the 24 h and 30 d figures are operational estimates and need 90 % of their span.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

from fleet import health
from fleet.storage import retention
from fleet.storage.schema import TIER_SECONDS, rollup_table

# A rolling figure covering less of its window than this is marked "not enough history"
# (still shown, with the span it covers): a 30-day PUE from 26 days is a fair estimate,
# one from 3 days is not (Fleetwatch's choice).
ENOUGH_FRACTION = 0.9

DAY_S = 86_400
ANNUAL_S = 365 * DAY_S
# The rolling windows the power page shows: (label, seconds).
WINDOWS: tuple[tuple[str, int], ...] = (
    ("24 h", DAY_S),
    ("30 d", 30 * DAY_S),
    ("12 months", ANNUAL_S),
)


@dataclass(frozen=True)
class RollingPue:
    label: str
    window_s: int
    tier: str  # the rollup tier it was read from
    value: float | None  # None: no bucket with both meters, or no category reported
    facility_kwh: float
    it_kwh: float
    covered_s: int  # seconds of buckets where both meters reported
    first: int | None  # start of the oldest bucket counted (Unix seconds)
    last: int | None  # end of the newest bucket counted
    category: int | None  # the lowest category reported in the window (the weakest claim)
    from_start: bool  # the oldest bucket counted is the window's first: history reaches back

    @property
    def annual(self) -> bool:
        return self.window_s >= ANNUAL_S

    @property
    def enough(self) -> bool:
        if self.annual and not self.from_start:
            return False  # ISO/IEC 30134-2's annual PUE takes a year of data
        return self.covered_s >= ENOUGH_FRACTION * self.window_s

    @property
    def category_words(self) -> str | None:
        return health.pue_category(self.category)


def kept_s(tier: str) -> float:
    """How far back a rollup tier of the facility meters reaches (its retention)."""
    return retention.kept_s(tier, "facility")


def tier_for(window_s: int) -> str:
    """The finest tier that still holds the whole window (1-minute means for a day)."""
    return "1m" if kept_s("1m") >= window_s else "1h"


def rolling_pue(
    site_id: int, label: str, window_s: int, now: float, using: str = DEFAULT_DB_ALIAS
) -> RollingPue:
    """PUE over the `window_s` before `now`, from energy (see the module's docstring)."""
    tier = tier_for(window_s)
    step = TIER_SECONDS[tier]
    since = now - window_s
    row = _one(
        using,
        "SELECT COUNT(*), SUM(total_power_w_mean), SUM(it_power_w_mean), MIN(bucket),"
        f" MAX(bucket), MIN(pue_category_min) FROM {rollup_table('facility', tier)}"
        " WHERE site_id = %s AND bucket >= %s AND bucket + %s <= %s"
        " AND total_power_w_mean IS NOT NULL AND it_power_w_mean > 0",
        [site_id, since, step, now],
    )
    count, total_w, it_w, first, last, category = row
    facility_kwh = float(total_w or 0.0) * step / 3.6e6  # W × s → kWh
    it_kwh = float(it_w or 0.0) * step / 3.6e6
    category = None if category is None else int(category)
    value = facility_kwh / it_kwh if it_kwh > 0 and health.pue_category(category) else None
    return RollingPue(
        label=label,
        window_s=window_s,
        tier=tier,
        value=value,
        facility_kwh=facility_kwh,
        it_kwh=it_kwh,
        covered_s=int(count) * step,
        first=None if first is None else int(first),
        last=None if last is None else int(last) + step,
        category=category,
        from_start=first is not None and first < since + step,
    )


def rolling_pues(site_id: int, now: float, using: str = DEFAULT_DB_ALIAS) -> list[RollingPue]:
    return [rolling_pue(site_id, label, window, now, using) for label, window in WINDOWS]


def power_series(
    site_id: int, since: float, until: float, tier: str = "1m", using: str = DEFAULT_DB_ALIAS
) -> dict[str, Any]:
    """Facility and IT power (bucket means, W) from `since`, for the chart: bucket starts
    in Unix seconds, None where a meter did not report, and the window itself (`start`,
    `end`): the chart's time axis spans it however little history there is."""
    with connections[using].cursor() as cur:
        cur.execute(
            "SELECT bucket, total_power_w_mean, it_power_w_mean"
            f" FROM {rollup_table('facility', tier)} WHERE site_id = %s AND bucket >= %s"
            " ORDER BY bucket",
            [site_id, int(since)],
        )
        rows = cur.fetchall()
    return {
        "start": since,
        "end": until,
        "t": [int(r[0]) for r in rows],
        "facility_w": [r[1] for r in rows],
        "it_w": [r[2] for r in rows],
    }


def _one(using: str, sql: str, params: list[Any]) -> tuple[Any, ...]:
    with connections[using].cursor() as cur:
        cur.execute(sql, params)
        row = cur.fetchone()
    assert row is not None  # an aggregate always answers one row
    return tuple(row)
