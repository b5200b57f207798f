"""Headroom by rack (/capacity/headroom/): an operator of a site sees each of its racks' room
on every constraint, the binding one and how many servers of the chosen model fit, the rack
with least room first, and the CSV holds the same figures; a site they may not see is a 404,
a model that cannot be judged a 400 with the reason.

The cast (tests/support/roles.py): site Demo (racks A01, A02 on CDU-1, 80 kW; each 45 kW of
budget, two 80 A feeds, one 8U HGX node at U1) and site North (rack N01)."""

from __future__ import annotations

import csv
import io

import pytest

from fleet.models import Rack, Site
from tests.support import people, roles
from tests.support.capacity_rows import operator_of_demo, seed_hours
from tests.support.pages import text

pytestmark = pytest.mark.django_db

fast_passwords = people.fast_passwords  # autouse
sites = roles.demo_and_north
URL = "/capacity/headroom/"


@pytest.fixture
def seeded(sites: tuple[Site, Site]) -> tuple[Site, Site]:
    seed_hours("A01", [20e3] * 24)
    seed_hours("A02", [40e3] * 24)  # 5 kW under its budget: the least room
    return sites


def test_the_racks_with_least_room_come_first_with_every_constraints_room(
    seeded: tuple[Site, Site],
) -> None:
    demo = seeded[0]
    query: dict[str, str | int] = {"site": demo.pk, "model": "HGX H200 8-GPU"}
    response = operator_of_demo().get(URL, query)
    page = text(response)
    assert response.status_code == 200
    assert "judged at 10.2 kW rated, 8 U each" in page
    # rack, hall, p99, budget room, N+1 room, CDU room (shared), free U, binding, fit
    a02 = "A02 Hall A 40.0 kW 5.0 kW 6.0 kW 20.0 kW 34 U power budget 0"
    a01 = "A01 Hall A 20.0 kW 25.0 kW 26.0 kW 20.0 kW 34 U CDU heat 1"
    assert a02 in page and a01 in page and page.index(a02) < page.index(a01)


def test_the_csv_has_the_rows_and_figures_the_page_shows(seeded: tuple[Site, Site]) -> None:
    demo = seeded[0]
    query: dict[str, str | int] = {"site": demo.pk, "model": "HGX H200 8-GPU"}
    otto = operator_of_demo()
    answer = otto.get(URL, {**query, "format": "csv"})
    assert answer["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(answer.content.decode())))
    assert [r["rack"] for r in rows] == ["A02", "A01"]
    a01 = rows[1]
    assert (a01["budget_room_kw"], a01["cdu_room_kw"], a01["free_u"]) == ("25.0", "20.0", "34")
    assert (a01["binding"], a01["servers_that_fit"], a01["model"]) == (
        "CDU heat",
        "1",
        "HGX H200 8-GPU",
    )
    page = text(otto.get(URL, query))
    assert f"A01 Hall A {a01['p99_kw']} kW {a01['budget_room_kw']} kW" in page


def test_without_a_model_the_sites_most_common_one_is_judged(seeded: tuple[Site, Site]) -> None:
    page = text(operator_of_demo().get(URL, {"site": str(seeded[0].pk)}))
    assert "Servers of HGX H200 8-GPU judged at" in page


def test_a_site_the_user_may_not_see_is_a_404(seeded: tuple[Site, Site]) -> None:
    north = seeded[1]
    assert operator_of_demo().get(URL, {"site": str(north.pk)}).status_code == 404
    assert Rack.objects.filter(hall__site=north).exists()


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("mystery", "model 'mystery' is not known at this site"),
        ("GB200 NVL72 compute tray", "has no measured or rated power or height here"),
    ],
)
def test_a_model_that_cannot_be_judged_is_a_400_with_the_reason(
    seeded: tuple[Site, Site], model: str, message: str
) -> None:
    response = operator_of_demo().get(URL, {"site": str(seeded[0].pk), "model": model})
    assert response.status_code == 400 and message in text(response)
