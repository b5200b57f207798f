"""Time to limit for a site's racks, feeds and CDUs: the series read from the rollups, each
against the limit the live pages and the alert rules already judge it by, forecast by
`fleet.read.forecast.time_to_limit` (docs/forecast.md).

- **rack power**: the rack's draw per bucket, its source chosen per bucket as the live pages
  choose it (the stranded-capacity statement, `fleet.read.capacity_sql`), against its budget
  × `RACK_POWER_CRIT_FRACTION` (the rack-power-100 rule's level);
- **feed power**: `power_w_mean` of `fw_feed_<tier>`, against `PowerFeed.available_kw` (the
  feed-over-rating rule's);
- **CDU supply**: `supply_c_mean` of `fw_loop_<tier>`, against
  `CoolingLoop.effective_supply_limit_c()` (its own limit, else its W class's);
- **heat removed**: `heat_removed_kw_mean` of `fw_loop_<tier>`, against
  `CoolingLoop.capacity_kw`;
- **feed N+1** (a rack with two or more feeds): its feeds' summed `power_w_mean`, in buckets
  where every one of them reported, against what they carry with the largest lost
  (`fleet.health.racks.n_plus_one_kw`);
- **GPU headroom**: each GPU's `temp_gpu_c_mean`, against its slowdown limit in force less
  `HEADROOM_CRIT_C` (fleet/read/forecast_gpus.py: only GPUs whose minutes rise are fitted).

Each subject's recent series is the `PARAMS.recent_s` of 1-minute means before `now`, and
its daily pattern the `PARAMS.pattern_days` of hourly means before that; each kind is read
with one statement per tier, for the whole site.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

from fleet.health.racks import n_plus_one_kw
from fleet.health.thresholds import HEADROOM_CRIT_C, RACK_POWER_CRIT_FRACTION
from fleet.models import CoolingLoop, PowerFeed, Rack
from fleet.read.capacity_sql import rack_series_params, rack_series_sql
from fleet.read.forecast import PARAMS, Forecast, ForecastParams, NoForecast, time_to_limit
from fleet.read.forecast_gpus import gpu_forecasts
from fleet.storage.schema import TIER_SECONDS, rollup_table

__all__ = (
    "LimitForecast",
    "Series",
    "feed_power",
    "feeds_power",
    "interval_words",
    "loop_metric",
    "rack_power",
    "sentence",
    "site_forecasts",
)

DAY_S = 86_400

Series = dict[int, list[tuple[float, float]]]  # entity id → (bucket centre, value)


@dataclass(frozen=True)
class LimitForecast:
    """One subject's forecast against its limit. `subject`: rack, feed, loop_supply,
    loop_heat, feed_n1, gpu or disk; `entity_id` the rack's, feed's, loop's or GPU's id (a
    feed_n1's is its rack's; the disk's its site's); `rack` the rack's name for a rack,
    feed, feed_n1 or GPU ("" otherwise). `key`: the entity as the alert rules key it where
    that is not `(entity_id,)` — a GPU's (node id, index)."""

    subject: str
    entity_id: int
    name: str
    rack: str
    limit: float
    unit: str
    forecast: Forecast | NoForecast
    key: tuple[int, ...] = ()

    @property
    def rule_key(self) -> tuple[int, ...]:
        """The entity's key among a rule's values (fleet/alerts/evaluate_forecast.py)."""
        return self.key or (self.entity_id,)


# Each subject's sentence; {name}, {limit} and {when} filled in by `sentence`.
_WORDS = {
    "rack": "{name} reaches {limit} in {when} at this trend",
    "feed": "{name} reaches {limit} in {when} at this trend",
    "loop_supply": "{name} supply reaches {limit} in {when} at this trend",
    "loop_heat": "{name} heat removed reaches {limit} in {when} at this trend",
    "feed_n1": "{name} feeds reach {limit}, their N+1 (all less the largest), in {when}"
    " at this trend",
    "gpu": "{name} reaches {limit}, "
    + f"{HEADROOM_CRIT_C:g} °C under its slowdown limit, in {{when}} at this trend",
    "disk": "{name} fills its disk ({limit}) in {when} at this trend",
}


def sentence(item: LimitForecast) -> str | None:
    """The page's words for a forecast ("A07 reaches 45 kW in ~40 min at this trend"); None
    where there is no forecast. The one owner of these words: pages render what they get."""
    forecast = item.forecast
    if not isinstance(forecast, Forecast):
        return None
    when = _minutes(forecast.in_s)
    limit = f"{round(item.limit, 1):g} {item.unit}"
    return _WORDS[item.subject].format(name=item.name, limit=limit, when=when)


def _minutes(seconds: float) -> str:
    minutes = seconds / 60
    return f"~{round(minutes)} min" if minutes < 100 else f"~{minutes / 60:.1f} h"


def interval_words(item: LimitForecast) -> str | None:
    """The crossing's interval in words ("90 % interval: ~36 min to ~45 min; fitted to 180
    minute means"), for a title or small print under the sentence; None without one."""
    forecast = item.forecast
    if not isinstance(forecast, Forecast):
        return None
    start = _minutes(forecast.earliest - forecast.now)
    end = _minutes(forecast.latest - forecast.now)
    pattern = " and the daily pattern" if forecast.daily else ""
    return (
        f"{round(100 * PARAMS.interval)} % interval: {start} to {end};"
        f" fitted to {forecast.points} minute means{pattern}"
    )


def _series(sql: str, params: Sequence[Any], step: int, scale: float, using: str) -> Series:
    """Rows of (entity id, bucket, value) as each entity's points at their bucket's centre."""
    out: Series = {}
    with connections[using].cursor() as cur:
        cur.execute(sql, list(params))
        for entity, bucket, value in cur.fetchall():
            out.setdefault(int(entity), []).append((int(bucket) + step / 2, float(value) * scale))
    return out


def rack_power(site_id: int, since: float, until: float, tier: str, using: str) -> Series:
    """Each rack's draw (kW) per whole bucket in [since, until), from the source the live
    pages would use in that bucket (PDU, else node meters, else GPU power)."""
    # The stranded-capacity statement's per-bucket series: one rule for a rack's draw.
    sql = (
        "WITH "
        + rack_series_sql(tier)
        + "SELECT rack_id, bucket, w FROM series WHERE w IS NOT NULL ORDER BY rack_id, bucket"
    )
    return _series(sql, rack_series_params(site_id, since, until), TIER_SECONDS[tier], 1e-3, using)


def feed_power(site_id: int, since: float, until: float, tier: str, using: str) -> Series:
    """Each feed's power (kW) per whole bucket in [since, until)."""
    step = TIER_SECONDS[tier]
    sql = (
        f"SELECT r.feed_id, r.bucket, r.power_w_mean FROM {rollup_table('feed', tier)} r"
        " JOIN fleet_powerfeed f ON f.id = r.feed_id JOIN fleet_rack k ON k.id = f.rack_id"
        " JOIN fleet_hall h ON h.id = k.hall_id"
        f" WHERE h.site_id = %s AND r.bucket >= %s AND r.bucket + {step} <= %s"
        " AND r.power_w_mean IS NOT NULL ORDER BY r.feed_id, r.bucket"
    )
    return _series(sql, (site_id, int(since), int(until)), step, 1e-3, using)


def feeds_power(
    site_id: int, since: float, until: float, tier: str, using: str, feeds: dict[int, int]
) -> Series:
    """Each rack's feeds' summed power (kW) per whole bucket in [since, until), by rack id,
    in the buckets where all of its `feeds[rack id]` feeds reported: a feed missing from a
    bucket would read as a drop in the sum."""
    step = TIER_SECONDS[tier]
    sql = (
        f"SELECT f.rack_id, r.bucket, SUM(r.power_w_mean), COUNT(*) FROM"
        f" {rollup_table('feed', tier)} r"
        " JOIN fleet_powerfeed f ON f.id = r.feed_id JOIN fleet_rack k ON k.id = f.rack_id"
        " JOIN fleet_hall h ON h.id = k.hall_id"
        f" WHERE h.site_id = %s AND r.bucket >= %s AND r.bucket + {step} <= %s"
        " AND r.power_w_mean IS NOT NULL GROUP BY f.rack_id, r.bucket"
        " ORDER BY f.rack_id, r.bucket"
    )
    out: Series = {}
    with connections[using].cursor() as cur:
        cur.execute(sql, [site_id, int(since), int(until)])
        for rack, bucket, watts, count in cur.fetchall():
            if count == feeds.get(int(rack)):
                out.setdefault(int(rack), []).append((int(bucket) + step / 2, float(watts) * 1e-3))
    return out


def loop_metric(
    site_id: int, metric: str, since: float, until: float, tier: str, using: str
) -> Series:
    """Each loop's `metric` bucket means (`supply_c`, `heat_removed_kw`) in [since, until)."""
    step = TIER_SECONDS[tier]
    column = f"{metric}_mean"
    sql = (
        f"SELECT r.loop_id, r.bucket, r.{column} FROM {rollup_table('loop', tier)} r"
        " JOIN fleet_coolingloop l ON l.id = r.loop_id"
        f" WHERE l.site_id = %s AND r.bucket >= %s AND r.bucket + {step} <= %s"
        f" AND r.{column} IS NOT NULL ORDER BY r.loop_id, r.bucket"
    )
    return _series(sql, (site_id, int(since), int(until)), step, 1.0, using)


@dataclass(frozen=True)
class _Subject:
    entity_id: int
    name: str
    rack: str
    limit: float | None


Reader = Callable[[float, float, str], Series]


def _forecasts(
    kind: str,
    unit: str,
    subjects: Iterable[_Subject],
    read: Reader,
    now: float,
    params: ForecastParams,
) -> list[LimitForecast]:
    recent_since = now - params.recent_s
    recent = read(recent_since, now, "1m")
    daily = read(recent_since - params.pattern_days * DAY_S, recent_since, "1h")
    out = []
    for s in subjects:
        if s.limit is None or s.limit <= 0:
            continue  # no limit to reach (a loop without a class or its own limit)
        points, hours = recent.get(s.entity_id, []), daily.get(s.entity_id, [])
        forecast = time_to_limit(points, s.limit, now, daily=hours, params=params)
        out.append(LimitForecast(kind, s.entity_id, s.name, s.rack, s.limit, unit, forecast))
    return out


def site_forecasts(
    site_id: int,
    now: float,
    using: str = DEFAULT_DB_ALIAS,
    params: ForecastParams = PARAMS,
) -> list[LimitForecast]:
    """Every rack, feed and loop of the site with a limit, forecast as of `now`: racks
    and feeds in the inventory's order, then loops (supply, then heat removed), then each
    rack's feeds against their N+1, then the GPUs whose temperature rises (only those:
    fleet/read/forecast_gpus.py)."""
    racks = Rack.objects.using(using).filter(hall__site_id=site_id)
    rack_subjects = [
        _Subject(pk, name, name, budget * RACK_POWER_CRIT_FRACTION)
        for pk, name, budget in racks.values_list("pk", "name", "power_budget_kw")
    ]
    feeds = PowerFeed.objects.using(using).filter(rack__hall__site_id=site_id)
    feed_subjects: list[_Subject] = []
    by_rack: dict[int, tuple[str, list[float]]] = {}
    for f in feeds.select_related("rack"):
        feed_subjects.append(
            _Subject(f.pk, f"{f.rack.name} feed {f.name}", f.rack.name, f.available_kw)
        )
        by_rack.setdefault(f.rack_id, (f.rack.name, []))[1].append(f.available_kw)
    # N+1 only where a feed can be lost at all: a rack with one feed has none left.
    n1_subjects = [
        _Subject(pk, name, name, n_plus_one_kw(ratings))
        for pk, (name, ratings) in by_rack.items()
        if len(ratings) >= 2
    ]
    feed_count = {pk: len(ratings) for pk, (_, ratings) in by_rack.items()}
    loops = list(CoolingLoop.objects.using(using).filter(site_id=site_id))
    supply_subjects = [_Subject(lp.pk, lp.name, "", lp.effective_supply_limit_c()) for lp in loops]
    heat_subjects = [_Subject(lp.pk, lp.name, "", lp.capacity_kw) for lp in loops]

    def loops_of(metric: str) -> Reader:
        return lambda a, b, tier: loop_metric(site_id, metric, a, b, tier, using)

    out = _forecasts(
        "rack",
        "kW",
        rack_subjects,
        lambda a, b, tier: rack_power(site_id, a, b, tier, using),
        now,
        params,
    )
    out += _forecasts(
        "feed",
        "kW",
        feed_subjects,
        lambda a, b, tier: feed_power(site_id, a, b, tier, using),
        now,
        params,
    )
    out += _forecasts("loop_supply", "°C", supply_subjects, loops_of("supply_c"), now, params)
    out += _forecasts("loop_heat", "kW", heat_subjects, loops_of("heat_removed_kw"), now, params)
    out += _forecasts(
        "feed_n1",
        "kW",
        n1_subjects,
        lambda a, b, tier: feeds_power(site_id, a, b, tier, using, feed_count),
        now,
        params,
    )
    out += [
        LimitForecast(
            "gpu", g.gpu_id, g.name, g.rack, g.limit, "°C", g.forecast, (g.node_id, g.index)
        )
        for g in gpu_forecasts(site_id, now, using, params)
    ]
    return out
