"""Time to limit for a rack's feeds against their N+1 and for each GPU's temperature against
its slowdown limit less the critical headroom (fleet/read/forecast_sources.py,
fleet/read/forecast_gpus.py), on both database tiers, from seeded rollup rows: a ramp with a
known crossing is forecast within 10 % of it; flat and noisy series are not; a GPU the SQL
screen passes by has no entry at all."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from fleet.health.racks import n_plus_one_kw
from fleet.health.thresholds import HEADROOM_CRIT_C
from fleet.models import GPU, Hall, Node, PowerFeed, Rack, Site
from fleet.read import forecast_gpus
from fleet.read.forecast import PARAMS, Forecast, NoForecast
from fleet.read.forecast_sources import LimitForecast, sentence, site_forecasts
from tests.support import databases
from tests.support.databases import T, TierDb
from tests.support.series import ramp

MINUTE = 60

db = databases.fresh_tier_db  # each test's own database, both tiers


def minutes(
    shape: Callable[[float], float], sd: float = 0.0, seed: int = 0
) -> list[tuple[int, float]]:
    """(bucket, value at its centre plus noise) for each whole minute of the recent window."""
    rng = random.Random(seed)
    start = T - int(PARAMS.recent_s)
    return [(b, shape(b + MINUTE / 2) + rng.gauss(0, sd)) for b in range(start, T, MINUTE)]


def reaches_at(forecast: Forecast | NoForecast, true_at: float) -> bool:
    assert isinstance(forecast, Forecast), forecast
    return abs(forecast.crossing_at - true_at) <= 0.1 * (true_at - T)


def by_subject(db: TierDb, site: Site) -> dict[tuple[str, str], LimitForecast]:
    return {(f.subject, f.name): f for f in site_forecasts(site.pk, T, using=db.alias)}


@pytest.fixture
def site(db: TierDb) -> Site:
    site = Site.objects.using(db.alias).create(slug="s1", name="Site 1")
    Hall.objects.using(db.alias).create(site=site, name="Hall A")
    return site


def rack(db: TierDb, site: Site, name: str) -> Rack:
    hall = Hall.objects.using(db.alias).get(site=site)
    return Rack.objects.using(db.alias).create(hall=hall, name=name, power_budget_kw=100)


def feed_rows(db: TierDb, feed: PowerFeed, rows: list[tuple[int, float]]) -> None:
    db.insert(
        "fw_feed_1m",
        ("feed_id", "bucket", "n", "power_w_mean"),
        [(feed.pk, b, 6, w) for b, w in rows],
    )


def test_a_racks_feeds_climbing_to_their_n_plus_one_are_forecast(db: TierDb, site: Site) -> None:
    a07 = rack(db, site, "A07")
    a, b = (PowerFeed.objects.using(db.alias).create(rack=a07, name=n, amperage=32) for n in "AB")
    n1 = n_plus_one_kw([a.available_kw, b.available_kw])  # 18.4 kW: one feed's rating
    # together 2 kW under it now, rising 3 kW an hour: N+1 in 40 minutes; each feed alone
    # stays far under its own rating
    for feed in (a, b):
        feed_rows(db, feed, minutes(ramp((n1 - 2) * 500, T, 1.5e3), sd=20, seed=feed.pk))
    flat = rack(db, site, "A08")
    for name in "AB":
        feed = PowerFeed.objects.using(db.alias).create(rack=flat, name=name, amperage=32)
        feed_rows(db, feed, minutes(lambda t: 7e3, sd=40, seed=feed.pk))
    single = rack(db, site, "A09")  # one feed: no N+1 to lose
    PowerFeed.objects.using(db.alias).create(rack=single, name="A", amperage=32)

    got = by_subject(db, site)

    item = got[("feed_n1", "A07")]
    assert item.limit == pytest.approx(n1) and item.entity_id == a07.pk and item.rack == "A07"
    assert reaches_at(item.forecast, T + 40 * MINUTE)
    assert sentence(item) == (
        "A07 feeds reach 18.4 kW, their N+1 (all less the largest), in ~40 min at this trend"
    )
    assert not got[("feed_n1", "A08")].forecast
    assert ("feed_n1", "A09") not in got


def test_a_bucket_one_feed_missed_is_not_read_as_a_drop(db: TierDb, site: Site) -> None:
    """Summing only the feeds that reported would halve the sum in that minute."""
    a07 = rack(db, site, "A07")
    a, b = (PowerFeed.objects.using(db.alias).create(rack=a07, name=n, amperage=32) for n in "AB")
    rows = minutes(ramp(8.2e3, T, 1.5e3), sd=20)
    feed_rows(db, a, rows)
    feed_rows(db, b, rows[:-1])  # B's newest minute is not in yet

    item = by_subject(db, site)[("feed_n1", "A07")]

    assert reaches_at(item.forecast, T + 40 * MINUTE)


def gpus(db: TierDb, site: Site, count: int, slowdown_c: float = 87.0) -> list[GPU]:
    r = rack(db, site, "G01")
    node = Node.objects.using(db.alias).create(name="g01-n1", rack=r)
    return [
        GPU.objects.using(db.alias).create(node=node, index=i, reported_slowdown_c=slowdown_c)
        for i in range(count)
    ]


def temps(db: TierDb, gpu: GPU, rows: list[tuple[int, float]]) -> None:
    db.insert(
        "fw_gpu_1m",
        ("node_id", "gpu", "bucket", "n", "temp_gpu_c_mean"),
        [(gpu.node_id, gpu.index, b, 6, c) for b, c in rows],
    )


def test_a_rising_gpu_is_forecast_to_its_slowdown_less_the_critical_headroom(
    db: TierDb, site: Site
) -> None:
    rising, flat, noisy, no_limit, far = gpus(db, site, 5)
    # limit 87 − 3 = 84 °C: 80 °C now, 6 °C an hour, reaches it in 40 minutes
    temps(db, rising, minutes(ramp(80.0, T, 6.0), sd=0.1, seed=1))
    temps(db, flat, minutes(lambda t: 70.0, sd=0.1, seed=2))
    temps(db, noisy, minutes(lambda t: 78.0, sd=2.0, seed=3))
    GPU.objects.using(db.alias).filter(pk=no_limit.pk).update(reported_slowdown_c=None)
    temps(db, no_limit, minutes(ramp(80.0, T, 6.0), sd=0.1, seed=4))
    # warming as fast, but 30 °C under its limit: 5 hours away, beyond the 3-hour horizon
    temps(db, far, minutes(ramp(54.0, T, 6.0), sd=0.1, seed=5))

    got = [f for f in site_forecasts(site.pk, T, using=db.alias) if f.subject == "gpu"]

    (item,) = got  # only the rising GPU with a limit in reach: the others are screened out
    assert item.entity_id == rising.pk and item.rule_key == (rising.node_id, rising.index)
    assert item.limit == pytest.approx(87.0 - HEADROOM_CRIT_C) and item.rack == "G01"
    assert reaches_at(item.forecast, T + 40 * MINUTE)
    assert sentence(item) == (
        "g01-n1 GPU 0 reaches 84 °C, 3 °C under its slowdown limit, in ~40 min at this trend"
    )


def test_the_screen_passes_rising_gpus_and_none_that_hold_steady(db: TierDb, site: Site) -> None:
    """The SQL screen over 20 flat, noisy GPUs and 4 slowly rising ones."""
    many = gpus(db, site, 24)
    for i, gpu in enumerate(many):
        shape = ramp(60.0, T, 1.0) if i < 4 else (lambda t: 60.0)
        temps(db, gpu, minutes(shape, sd=0.3, seed=i))

    since = T - PARAMS.recent_s
    screened = forecast_gpus.rising_gpus(site.pk, since, T, db.alias, PARAMS.min_points)

    assert {(g.node_id, g.index) for g in many[:4]} <= screened.keys()
    assert len(screened) <= 4 + 1  # a flat one passes by chance rarely (t ≥ 3: ~0.1 %)
    # and what passes the screen is fitted: the flat ones that slipped through get none
    fitted = [f for f in site_forecasts(site.pk, T, using=db.alias) if f.subject == "gpu"]
    assert all(not f.forecast for f in fitted if f.entity_id not in {g.pk for g in many[:4]})
