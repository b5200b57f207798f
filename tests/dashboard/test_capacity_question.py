"""The capacity page's question form: an operator of a site asks whether one of its racks
takes N more servers of a model and the page answers yes or no with the binding constraint,
its margin, and every constraint checked with its figures — for a rack bound by its power
budget, by its feeds less any one (N+1), by its CDU with the other rack on it, and by its
free units — the same answer the API gives. Bad input is a 4xx with the reason on the page;
a rack of a site the user may not see is a 404.

The cast (tests/support/roles.py): site Demo (racks A01, A02 on CDU-1, 80 kW; each 45 kW of
budget, two 80 A feeds, one 8U HGX node at U1) and site North (rack N01)."""

from __future__ import annotations

import pytest
from django.test import Client

from fleet.models import CoolingLoop, PowerFeed, Rack, Site
from tests.support import people, roles
from tests.support.capacity_rows import operator_of_demo, seed_hours
from tests.support.pages import text

pytestmark = pytest.mark.django_db

fast_passwords = people.fast_passwords  # autouse
sites = roles.demo_and_north
URL = "/capacity/"
Query = dict[str, str | int]
BOX: Query = {"model": "1U box", "watts": 4000, "units": 1}  # 4 kW per server, 1U


@pytest.fixture
def a01(sites: tuple[Site, Site]) -> int:
    seed_hours("A01", [30e3] * 24)  # p99 30 kW of a 45 kW budget
    seed_hours("A02", [10e3] * 24)  # the other rack on CDU-1
    return Rack.objects.get(name="A01").pk


@pytest.fixture
def otto(a01: int) -> Client:
    return operator_of_demo()


def ask(client: Client, rack: int, servers: int, **question: str | int) -> tuple[int, str]:
    response = client.get(URL, {"rack": rack, "servers": servers, **question})
    return response.status_code, text(response)


def test_a_rack_bound_by_its_budget_says_no_with_the_margin_and_every_constraint(
    a01: int, otto: Client
) -> None:
    status, page = ask(otto, a01, 4, **BOX)
    assert status == 200
    assert "No: A01 cannot take 4 more × 1U box (4.0 kW each (request), 1 U)" in page
    assert "Binding: power budget, margin -1.0 kW (3 fit)" in page  # 45 − 30 − 16
    # constraint, limit, used, the servers add, margin, servers it takes
    assert "power budget 45.0 kW 30.0 kW 16.0 kW -1.0 kW 3 budget 45.0 kW" in page
    assert "feed N+1 46.0 kW 30.0 kW 16.0 kW 0.0 kW 4 2 feeds less any one: 46.0 kW" in page
    assert "CDU heat 80.0 kW 40.0 kW 16.0 kW 24.0 kW 10 CDU-1 80.0 kW" in page
    assert "space 42 U 8 U 4 U 30 U 34 34 of 42 U free" in page
    _, yes = ask(otto, a01, 3, **BOX)
    assert "Yes: A01 can take 3 more" in yes and "margin 3.0 kW (3 fit)" in yes


def test_a_rack_bound_by_its_feeds_less_any_one(a01: int, otto: Client) -> None:
    PowerFeed.objects.filter(rack_id=a01).update(amperage=63)  # 36.2 kW each
    _, page = ask(otto, a01, 2, **BOX)
    assert "No: A01 cannot take 2 more" in page
    assert "Binding: feed N+1, margin -1.8 kW (1 fit)" in page  # 36.2 − 30 − 8


def test_a_rack_bound_by_its_cdu_and_the_other_rack_on_it(a01: int, otto: Client) -> None:
    CoolingLoop.objects.filter(name="CDU-1").update(capacity_kw=42)
    _, page = ask(otto, a01, 1, **BOX)
    assert "Binding: CDU heat, margin -2.0 kW (0 fit)" in page  # 42 − 30 − 10 − 4
    assert "CDU-1 42.0 kW; its 1 other rack(s) draw 10.0 kW at p99" in page


def test_a_rack_bound_by_its_free_units(a01: int, otto: Client) -> None:
    _, page = ask(otto, a01, 1, model="40U box", watts=100, units=40)
    assert "No: A01 cannot take 1 more × 40U box" in page
    assert "Binding: space, margin -6 U (0 fit)" in page  # 34 U free above the HGX node


def test_the_page_and_the_api_give_the_same_answer(a01: int, otto: Client) -> None:
    question: Query = {"rack": a01, "servers": 4, **BOX}
    api = otto.get("/api/capacity/answer", question).json()
    _, page = ask(otto, a01, 4, **BOX)
    binding = next(c for c in api["constraints"] if c["name"] == api["binding"])
    assert f"Binding: {api['binding']}, margin {binding['margin']:.1f} kW" in page


def test_the_form_offers_the_sites_racks_and_models_with_their_power(a01: int) -> None:
    response = operator_of_demo().get(URL)
    page = text(response)
    assert response.status_code == 200 and "Can a rack take more servers?" in page
    assert "HGX H200 8-GPU (Demo datacentre: 10.2 kW rated)" in page  # no node hours seeded
    assert "GB200 NVL72 compute tray (Demo datacentre: no measured or rated power" in page
    html = response.content.decode()
    assert f'<option value="{a01}">A01</option>' in html
    assert ">N01<" not in html  # otto may not see North


@pytest.mark.parametrize(
    ("question", "status", "message"),
    [
        ({"servers": "0", **BOX}, 400, "servers — must be positive"),
        ({"servers": "500", **BOX}, 400, "servers — a whole number of servers, 1 to 42"),
        ({"servers": "two", **BOX}, 400, "servers — not a number: 'two'"),
        ({"servers": "1", "model": "mystery"}, 400, "units — the height of 'mystery'"),
        ({"servers": "1"}, 400, "model — required"),
        ({"servers": "1", "rack": "999999", **BOX}, 404, "no such rack"),
    ],
)
def test_bad_input_is_a_4xx_with_the_reason_on_the_page(
    a01: int, question: Query, status: int, message: str
) -> None:
    response = operator_of_demo().get(URL, {"rack": a01, **question})
    page = text(response)
    assert response.status_code == status
    assert f"Cannot answer: {message}" in page
    assert "Stranded in all racks:" in page  # the rest of the page is still there


def test_a_rack_of_a_site_the_user_may_not_see_is_a_404(a01: int, otto: Client) -> None:
    n01 = Rack.objects.get(name="N01").pk
    status, page = ask(otto, n01, 1, **BOX)
    assert status == 404 and "Cannot answer: no such rack." in page
    assert "N01" not in page
