"""The capacity page: an operator of a site sees each of its racks' budget, p95 and p99
draw over 30 days, the kW stranded and the GPUs that would fit, with the chart's figures
and a CSV holding the same figures; a viewer of another site gets nothing of it (a 404
for the site, as the rack page gives, and no row of it in their own page or CSV).

The cast (tests/support/roles.py): site Demo (racks A01, A02) and site North (rack N01)."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from django.test import Client

from fleet.models import GPU, Rack, Site
from tests.support import people, roles
from tests.support.capacity_rows import operator_of_demo, seed_hours
from tests.support.pages import text
from tests.support.roles import person, signed_in

pytestmark = pytest.mark.django_db

fast_passwords = people.fast_passwords  # autouse
sites = roles.demo_and_north


@pytest.fixture
def seeded(sites: tuple[Site, Site]) -> tuple[Site, Site]:
    Rack.objects.filter(name="A01").update(power_budget_kw=50)
    GPU.objects.filter(node__rack__name="A01").update(reported_power_limit_max_w=700)
    # 100 hours: 20 kW, 30 kW … in a spread whose p95 and p99 are known by hand
    seed_hours("A01", [20e3 + 100.0 * k for k in range(100)])
    seed_hours("N01", [35e3] * 10)
    return sites


def viewer_of_north() -> Client:
    return signed_in(person("vic", north="viewer"))


def test_an_operator_sees_budget_draw_stranded_kw_and_the_gpus_that_fit(
    seeded: tuple[Site, Site],
) -> None:
    page = text(operator_of_demo().get("/capacity/"))
    # p95 of 20.0 … 29.9 kW: 20 + 0.1 × 94.05 = 29.405; p99: 29.801; stranded 50 − 29.8
    assert "A01 Hall A 50.0 kW 29.4 kW 29.8 kW 20.2 kW 28 × NVIDIA H200 at 700 W none" in page
    assert "Stranded in all racks:" in page and "Capacity" in page
    assert "North" not in page  # otto sees Demo only


def test_the_chart_gets_each_racks_budget_and_draw(seeded: tuple[Site, Site]) -> None:
    demo = seeded[0]
    html = operator_of_demo().get("/capacity/").content.decode()
    found = re.search(r'<script id="capacity-data" type="application/json">(.*?)</script>', html)
    assert found is not None
    chart = json.loads(found.group(1))["charts"][str(demo.pk)]
    at = chart["racks"].index("A01")
    assert (chart["budget_kw"][at], chart["p95_kw"][at], chart["p99_kw"][at]) == (50, 29.4, 29.8)
    assert '<script src="/vendor/plotly.min.js"></script>' in html


def test_the_csv_has_the_figures_the_page_shows(seeded: tuple[Site, Site]) -> None:
    client = operator_of_demo()
    answer = client.get("/capacity/?format=csv")
    assert answer["Content-Type"].startswith("text/csv")
    rows = {r["rack"]: r for r in csv.DictReader(io.StringIO(answer.content.decode()))}
    a01 = rows["A01"]
    page = text(client.get("/capacity/"))
    figures = [a01[c] + " kW" for c in ("budget_kw", "p95_kw", "p99_kw", "stranded_kw")]
    assert " ".join(figures) in page
    assert f"{a01['gpus_that_fit']} × NVIDIA H200 at {a01['gpu_limit_w']} W" in page
    assert (a01["site"], a01["budget_spent_while_idle"], a01["history_covered_h"]) == (
        "Demo datacentre",
        "no",
        "100",
    )
    assert "N01" not in rows


def test_a_viewer_of_another_site_gets_nothing_of_it(seeded: tuple[Site, Site]) -> None:
    demo, north = seeded
    client = viewer_of_north()
    page = text(client.get("/capacity/"))
    assert "N01" in page and "35.0 kW" in page
    assert "A01" not in page and "Demo" not in page
    assert client.get(f"/capacity/?site={demo.pk}").status_code == 404
    assert client.get(f"/capacity/?site={demo.pk}&format=csv").status_code == 404
    listed = client.get("/capacity/?format=csv").content.decode()
    assert "A01" not in listed and "N01" in listed
    assert client.get(f"/capacity/?site={north.pk}").status_code == 200


def test_the_capacity_page_is_in_the_navigation(seeded: tuple[Site, Site]) -> None:
    html = operator_of_demo().get("/power/").content.decode()
    assert '<a href="/capacity/" >Capacity</a>' in html
