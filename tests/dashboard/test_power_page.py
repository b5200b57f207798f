"""Rolling PUE is energy over energy (Σ power × time from the facility rollups), not an
average of ratios, with the span it covers and "not enough history" when short, on both
database tiers; and the power page shows facility, IT and cooling power, the live PUE with
its category, the rolling figures and the chart's data, for the sites the user may see."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from typing import Any

import pytest
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.test import Client, override_settings

from fleet import access
from fleet.demo import seed_demo_site
from fleet.models import Site
from fleet.read.pue import DAY_S, rolling_pue
from tests.support import databases
from tests.support.databases import TierDb
from tests.support.latest import store_latest as store
from tests.support.pages import fold
from tests.support.people import viewer

T = 1_800_000_000  # an hour boundary: "now" in the maths tests
HOUR, MINUTE = 3600, 60
Bucket = tuple[int, float | None, float, int]  # start, facility W mean, IT W mean, category
COLUMNS = ("site_id", "bucket", "n", "total_power_w_mean", "it_power_w_mean", "pue_category_min")


def seed(alias: str, tier: str, site_id: int, rows: Sequence[Bucket]) -> None:
    """Facility rollup buckets: (bucket start, facility W mean, IT W mean, category)."""
    marks = ", ".join(["%s"] * len(COLUMNS))
    with transaction.atomic(using=alias), connections[alias].cursor() as cur:
        cur.executemany(
            f"INSERT INTO fw_facility_{tier} ({', '.join(COLUMNS)}) VALUES ({marks})",
            [(site_id, b, 60, total, it, cat) for b, total, it, cat in rows],
        )


def hours_back(
    count: int, total_w: float | None, it_w: float, cat: int, skip: int = 0
) -> list[Bucket]:
    return [(T - (skip + k + 1) * HOUR, total_w, it_w, cat) for k in range(count)]


tier_db = databases.fresh_tier_db  # each test's own database, both tiers


# ---------------------------------------------------------------------------
# the maths, on each tier


def test_a_day_of_pue_is_facility_energy_over_it_energy_not_the_mean_ratio(
    tier_db: TierDb,
) -> None:
    minutes = [(T - (k + 1) * MINUTE, 1.2e6, 1.0e6, 2) for k in range(60)]
    minutes += [(T - (61 + k) * MINUTE, 0.9e6, 0.5e6, 2) for k in range(30)]
    seed(tier_db.alias, "1m", 1, minutes)
    day = rolling_pue(1, "24 h", DAY_S, T, using=tier_db.alias)
    # By hand: facility 60 × 1.2 + 30 × 0.9 = 99 MW·min, IT 60 × 1.0 + 30 × 0.5 = 75 MW·min.
    assert day.value == pytest.approx(99 / 75)  # 1.32; the mean of ratios would be 1.40
    assert day.tier == "1m"
    assert day.facility_kwh == pytest.approx(99e6 * 60 / 3.6e6)  # 1,650 kWh
    assert day.it_kwh == pytest.approx(1250.0)
    assert day.covered_s == 90 * MINUTE and not day.enough  # an hour and a half of 24 h
    assert (day.first, day.last) == (T - 90 * MINUTE, T)


def test_thirty_days_from_hourly_means_cover_the_window_and_a_year_does_not(
    tier_db: TierDb,
) -> None:
    hours = hours_back(448, 2.0e6, 1.6e6, 2) + hours_back(224, 1.0e6, 0.5e6, 1, skip=448)
    hours += hours_back(5, None, 1.0e6, 2, skip=672)  # IT only: no facility meter, not counted
    seed(tier_db.alias, "1h", 7, hours)
    month = rolling_pue(7, "30 d", 30 * DAY_S, T, using=tier_db.alias)
    expected = (448 * 2.0 + 224 * 1.0) / (448 * 1.6 + 224 * 0.5)  # 1120 / 828.8 MWh
    assert month.value == pytest.approx(expected)  # 1.351; mean of ratios: 1.50
    assert month.covered_s == 672 * HOUR and month.enough  # 28 of 30 days
    assert month.category == 1  # one category-1 hour: the weaker claim is the one stated
    year = rolling_pue(7, "12 months", 365 * DAY_S, T, using=tier_db.alias)
    assert year.value == pytest.approx(expected) and not year.enough


def test_no_history_or_no_category_gives_no_figure(tier_db: TierDb) -> None:
    assert rolling_pue(3, "24 h", DAY_S, T, using=tier_db.alias).value is None
    seed(tier_db.alias, "1h", 3, [(T - HOUR, 1.3e6, 1.0e6, None)])  # type: ignore[list-item]
    month = rolling_pue(3, "30 d", 30 * DAY_S, T, using=tier_db.alias)
    assert month.value is None and month.covered_s == HOUR  # PUE v2: no category, no figure


# ---------------------------------------------------------------------------
# the page (the test database)


@pytest.fixture
def site(db: None) -> Site:
    return seed_demo_site("demo", (), gpus_per_node=1)


@pytest.fixture
def client(site: Site, settings: Any) -> Client:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    viewer("ops")
    c = Client()
    c.login(username="ops", password="pw")
    return c


def test_the_power_page_needs_a_login(site: Site) -> None:
    response = Client().get("/power/")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_the_page_shows_power_now_live_pue_and_derived_cooling(client: Client, site: Site) -> None:
    store(
        "facility", (site.pk,), time.time(), total_power_w=1.3e6, it_power_w=1.0e6, pue_category=2
    )
    page = fold(client.get("/power/").content.decode())
    assert "Facility power 1.30 MW" in page and "IT power 1.00 MW" in page
    assert "Cooling power 300.0 kW facility − IT (no cooling meter)" in page
    assert "PUE now 1.30 (category 2: PDU output)" in page


def test_rolling_pue_rows_say_their_span_and_when_history_is_short(
    client: Client, site: Site
) -> None:
    now = time.time()
    hour = int(now // HOUR) * HOUR
    seed(
        DEFAULT_DB_ALIAS, "1h", site.pk, [(hour - (k + 2) * HOUR, 1.3e6, 1e6, 2) for k in range(6)]
    )
    page = fold(client.get("/power/").content.decode())
    assert "30 d 1.30 (category 2: PDU output)" in page
    assert "6 h of 30 d needs 30 d: 6 h so far" in page
    assert "12 months 1.30 (category 2: PDU output)" in page
    # facility hours are kept 400 days: a year is only short of history, not of retention
    assert "6 h of 365 d annual PUE needs 12 months: 6 h so far" in page
    assert "24 h no data – no history" in page  # no 1-minute means at all
    with override_settings(RETENTION_FACILITY_1H_HOURS=90 * 24):
        page = fold(client.get("/power/").content.decode())
    assert "not enough history: 90 d of history is kept" in page  # a year cannot fit


def test_the_chart_gets_the_last_days_and_months_facility_and_it_power(
    client: Client, site: Site
) -> None:
    now = time.time()
    minute = int(now // MINUTE) * MINUTE
    seed(
        DEFAULT_DB_ALIAS,
        "1m",
        site.pk,
        [(minute - 120, 1.3e6, 1e6, 2), (minute - 60, 1.4e6, 1.1e6, 2)],
    )
    html = client.get("/power/").content.decode()
    found = re.search(r'<script id="power-data" type="application/json">(.*?)</script>', html)
    assert found is not None
    charts = json.loads(found.group(1))["charts"][str(site.pk)]
    assert (charts["month"]["t"], charts["month"]["facility_w"]) == ([], [])  # no hours yet
    assert charts["day"].pop("end") - charts["day"].pop("start") == DAY_S  # the whole window
    assert charts["day"] == {
        "t": [minute - 120, minute - 60],
        "facility_w": [1.3e6, 1.4e6],
        "it_w": [1e6, 1.1e6],
    }
    assert '<script src="/vendor/plotly.min.js"></script>' in html
    assert "chart unavailable" in html  # what the chart area says until Plotly draws


def test_only_the_sites_a_user_may_see_are_shown(
    client: Client, site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = Site.objects.create(slug="north", name="North hall")
    monkeypatch.setattr(access, "visible_site_ids", lambda user: {other.pk})
    page = client.get("/power/").content.decode()
    assert f'id="power-site-{other.pk}"' in page and f'id="power-site-{site.pk}"' not in page


def test_a_site_without_facility_data_reads_no_data_everywhere(client: Client) -> None:
    page = fold(client.get("/power/").content.decode())
    assert "Facility power no data IT power no data Cooling power no data" in page
    assert "PUE now no data" in page
    assert "24 h no data – no history" in page and "; no history yet." in page
