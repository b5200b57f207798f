"""The annual PUE (ISO/IEC 30134-2: 12 months of facility energy over IT energy) works out
of the box: site energy hours are kept 400 days, so retention leaves a whole year; the
figure is energy over energy across the year; and until a year of history exists the
power page says how much there is, on both database tiers."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from fleet.read.pue import ANNUAL_S, DAY_S, RollingPue, kept_s, rolling_pue
from fleet.storage.partitions import slot
from fleet.storage.retention import apply_retention
from fleet.words import pue_history_words
from tests.support import databases
from tests.support.databases import T, TierDb, cover_test_clock

HOUR = 3600
Hour = tuple[int, float, float]  # bucket start, facility W mean, IT W mean


@pytest.fixture
def db(fresh_tier_db: TierDb) -> TierDb:
    """Each test's own database, with hourly facility partitions 440 days behind T."""
    cover_test_clock(fresh_tier_db, ("facility",), behind={"1h": 440 * DAY_S})
    return fresh_tier_db


fresh_tier_db = databases.fresh_tier_db


def hours(days_back: int, days: int, facility_w: float, it_w: float) -> list[Hour]:
    """`days` of hourly means ending `days_back` days before T."""
    end = T - days_back * DAY_S
    return [(end - (k + 1) * HOUR, facility_w, it_w) for k in range(days * 24)]


def seed(db: TierDb, rows: Sequence[Hour]) -> None:
    columns = ("site_id", "bucket", "n", "total_power_w_mean", "it_power_w_mean")
    db.insert(
        "fw_facility_1h", (*columns, "pue_category_min"), [(1, b, 60, f, i, 2) for b, f, i in rows]
    )


def annual(db: TierDb) -> RollingPue:
    return rolling_pue(1, "12 months", ANNUAL_S, T, using=db.alias)


def status(pue: RollingPue) -> str:
    """What the power page's status column says for it."""
    kept = kept_s(pue.tier)
    return pue_history_words(pue.label, pue.window_s, pue.covered_s, kept, pue.enough, pue.annual)


def test_a_year_of_hourly_energy_gives_facility_energy_over_it_energy(db: TierDb) -> None:
    summer = hours(0, 100, 1.3e6, 1.0e6)  # chillers working, full load: 1.3
    winter = hours(100, 265, 0.6e6, 0.3e6)  # free cooling, a light load: 2.0
    seed(db, summer + winter)
    year = annual(db)
    # By hand: facility (100 × 1.3 + 265 × 0.6) MW × 24 h = 6,936 MWh; IT (100 × 1.0
    # + 265 × 0.3) MW × 24 h = 4,308 MWh. The mean of the hourly ratios would be 1.81.
    assert year.facility_kwh == pytest.approx(6_936_000) and year.it_kwh == pytest.approx(4_308_000)
    assert year.value == pytest.approx(6936 / 4308)  # 1.61
    assert year.enough and status(year) == "full window"


def test_retention_leaves_a_whole_year_for_the_annual_pue(db: TierDb) -> None:
    seed(db, hours(0, 365, 1.4e6, 1.0e6) + hours(365, 75, 9.9e6, 1.0e6))  # 440 days

    apply_retention(T, using=db.alias)

    year = annual(db)
    assert year.enough and year.value == pytest.approx(1.4)  # older hours never count
    oldest = int(db.execute("SELECT min(bucket) FROM fw_facility_1h")[0][0])
    cutoff = T - 400 * DAY_S  # PostgreSQL keeps the whole partition that holds it
    assert oldest == (cutoff if db.vendor == "sqlite" else slot("1h", cutoff)[0])


def test_until_a_year_is_there_the_page_says_how_much_history_there_is(db: TierDb) -> None:
    seed(db, hours(0, 41, 1.4e6, 1.0e6))
    year = annual(db)
    assert year.value == pytest.approx(1.4) and not year.enough
    assert status(year) == "annual PUE needs 12 months: 41 d so far"

    seed(db, hours(41, 309, 1.4e6, 1.0e6))  # 350 days: 96 % of the window, not back to its start
    assert status(annual(db)) == "annual PUE needs 12 months: 350 d so far"
    assert rolling_pue(1, "30 d", 30 * DAY_S, T, using=db.alias).enough  # operational: enough


def test_retention_shorter_than_a_year_is_said_instead() -> None:
    kept = 90 * DAY_S
    words = pue_history_words("12 months", ANNUAL_S, 41 * DAY_S, kept, enough=False, annual=True)
    assert words == "not enough history: 90 d of history is kept"
