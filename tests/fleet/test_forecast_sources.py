"""Time to limit for a site's racks, feeds and CDUs (fleet/read/forecast_sources.py), on both
database tiers, from seeded rollup rows: each ramp is forecast to reach the limit the live
pages and the rules judge it by (rack budget, feed rating, the loop's W-class supply limit,
its rated heat) at the time the ramp reaches it, a flat series is not, and a week of hourly
means brings the daily pattern in."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import pytest

from fleet.health.thresholds import RACK_POWER_CRIT_FRACTION
from fleet.models import CoolingLoop, Hall, Node, PowerFeed, Rack, Site
from fleet.read.forecast import PARAMS, Forecast, NoForecast, Reason
from fleet.read.forecast_sources import LimitForecast, sentence, site_forecasts
from tests.support import databases
from tests.support.databases import T, TierDb
from tests.support.series import daily_wave, ramp

MINUTE, HOUR = 60, 3600

db = databases.fresh_tier_db  # each test's own database, both tiers


def buckets(
    shape: Callable[[float], float], step: int, since: float, until: float
) -> list[tuple[int, float]]:
    """(bucket start, the shape's value at the bucket's centre) for each whole bucket."""
    start = int(since) - int(since) % step
    return [(b, shape(b + step / 2)) for b in range(start, int(until) - step + 1, step)]


def recent(shape: Callable[[float], float]) -> list[tuple[int, float]]:
    return buckets(shape, MINUTE, T - PARAMS.recent_s, T)


class Site1:
    """One site's inventory in the test's database, and its rollup rows."""

    def __init__(self, db: TierDb) -> None:
        self.db = db
        self.site = Site.objects.using(db.alias).create(slug="s1", name="Site 1")
        self.hall = Hall.objects.using(db.alias).create(site=self.site, name="Hall A")

    def rack(self, name: str, budget_kw: float) -> Rack:
        return Rack.objects.using(self.db.alias).create(
            hall=self.hall, name=name, power_budget_kw=budget_kw
        )

    def rows(
        self, table: str, key: str, pk: int, column: str, rows: Sequence[tuple[int, float]]
    ) -> None:
        self.db.insert(
            table, (key, "bucket", "n", column), [(pk, b, 6, value) for b, value in rows]
        )

    def forecasts(self) -> dict[tuple[str, str], LimitForecast]:
        got = site_forecasts(self.site.pk, T, using=self.db.alias)
        return {(f.subject, f.name): f for f in got}


def reaches_at(forecast: Forecast | NoForecast, true_at: float) -> bool:
    assert isinstance(forecast, Forecast), forecast
    return abs(forecast.crossing_at - true_at) <= 0.1 * (true_at - T)


def test_each_ramp_reaches_the_limit_its_page_and_rule_judge_it_by(db: TierDb) -> None:
    site = Site1(db)
    a07 = site.rack("A07", budget_kw=45)
    # the PDU: 40 kW now, 7.5 kW an hour: 45 kW in 40 minutes
    site.rows("fw_rack_1m", "rack_id", a07.pk, "power_w_mean", recent(ramp(40e3, T, 7.5e3)))
    # no PDU: two node meters, 20 kW each now, each rising 5 kW/h: 50 kW in an hour
    c01 = site.rack("C01", budget_kw=50)
    for name in ("c01-n1", "c01-n2"):
        node = Node.objects.using(db.alias).create(name=name, rack=c01)
        site.rows("fw_node_1m", "node_id", node.pk, "power_w_mean", recent(ramp(20e3, T, 5e3)))
    feed = PowerFeed.objects.using(db.alias).create(rack=a07, name="A", amperage=32)
    rating = feed.available_kw  # 415 V × 32 A × 80 % × √3 = 18.4 kW
    site.rows(
        "fw_feed_1m", "feed_id", feed.pk, "power_w_mean", recent(ramp(rating * 1e3 - 2e3, T, 2e3))
    )
    loop = CoolingLoop.objects.using(db.alias).create(
        site=site.site, name="CDU-1", capacity_kw=400, liquid_class="W32"
    )
    supply_c, heat_kw = recent(ramp(30.5, T, 1.0)), recent(ramp(380, T, 40))
    db.insert(
        "fw_loop_1m",
        ("loop_id", "bucket", "n", "supply_c_mean", "heat_removed_kw_mean"),
        [(loop.pk, b, 6, c, kw) for (b, c), (_, kw) in zip(supply_c, heat_kw, strict=True)],
    )

    got = site.forecasts()

    rack = got[("rack", "A07")]
    assert rack.limit == pytest.approx(45 * RACK_POWER_CRIT_FRACTION) and rack.unit == "kW"
    assert reaches_at(rack.forecast, T + 40 * MINUTE)
    assert reaches_at(got[("rack", "C01")].forecast, T + HOUR)
    fed = got[("feed", "A07 feed A")]
    assert fed.limit == pytest.approx(rating) and fed.rack == "A07"
    assert reaches_at(fed.forecast, T + HOUR)
    supply = got[("loop_supply", "CDU-1")]
    assert supply.limit == 32.0 and supply.unit == "°C"
    assert reaches_at(supply.forecast, T + 90 * MINUTE)
    assert reaches_at(got[("loop_heat", "CDU-1")].forecast, T + 30 * MINUTE)
    assert sentence(rack) == "A07 reaches 45 kW in ~40 min at this trend"
    assert sentence(supply) == "CDU-1 supply reaches 32 °C in ~90 min at this trend"
    assert sentence(fed) == "A07 feed A reaches 18.4 kW in ~60 min at this trend"


def test_flat_and_silent_subjects_have_no_forecast(db: TierDb) -> None:
    site = Site1(db)
    flat = site.rack("B01", budget_kw=45)
    site.rows("fw_rack_1m", "rack_id", flat.pk, "power_w_mean", recent(lambda t: 30e3))
    site.rack("B02", budget_kw=45)  # no data at all
    # a loop with neither a class nor its own limit has no supply limit to reach
    CoolingLoop.objects.using(db.alias).create(site=site.site, name="CDU-2", capacity_kw=100)

    got = site.forecasts()

    assert got[("rack", "B01")].forecast == NoForecast(Reason.FLAT)
    assert sentence(got[("rack", "B01")]) is None
    assert got[("rack", "B02")].forecast == NoForecast(Reason.TOO_SHORT)
    assert ("loop_supply", "CDU-2") not in got
    assert got[("loop_heat", "CDU-2")].forecast == NoForecast(Reason.TOO_SHORT)


def test_a_week_of_hourly_means_brings_in_the_daily_pattern(db: TierDb) -> None:
    site = Site1(db)
    rack = site.rack("A07", budget_kw=45)
    wave = daily_wave(3.0)
    before = T - PARAMS.recent_s
    hours = buckets(lambda t: 30e3 + 1e3 * wave(t), HOUR, before - 7 * 86_400, before)
    site.rows("fw_rack_1h", "rack_id", rack.pk, "power_w_mean", hours)
    rising = ramp(40e3, T, 7.5e3)
    # with a meter's noise: without any, the profile's small interpolation error between
    # hour centres is all that is left, smooth, and reads as a wander, not as noise
    rng = random.Random(7)
    minutes = recent(lambda t: rising(t) + 1e3 * wave(t) + rng.gauss(0, 300))
    site.rows("fw_rack_1m", "rack_id", rack.pk, "power_w_mean", minutes)

    forecast = site.forecasts()[("rack", "A07")].forecast

    assert isinstance(forecast, Forecast) and forecast.daily


def test_buckets_outside_the_recent_window_are_not_fitted(db: TierDb) -> None:
    """A rack that rose hours ago and has been flat since: only the last hours count."""
    site = Site1(db)
    rack = site.rack("A07", budget_kw=45)
    old = buckets(ramp(20e3, T - PARAMS.recent_s, 5e3), MINUTE, T - 2 * PARAMS.recent_s, T)
    site.rows("fw_rack_1m", "rack_id", rack.pk, "power_w_mean", old[: len(old) // 2])
    site.rows("fw_rack_1m", "rack_id", rack.pk, "power_w_mean", recent(lambda t: 20e3))

    assert site.forecasts()[("rack", "A07")].forecast == NoForecast(Reason.FLAT)
