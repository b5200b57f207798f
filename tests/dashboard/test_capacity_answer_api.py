"""GET /api/capacity/answer: a signed-in operator of a site asks whether one of its racks
takes N more servers and gets yes or no with the binding constraint; a rack of a site they
may not see is a 404, bad input a 400 naming the field, and no sign-in a 401.

The cast (tests/support/roles.py): site Demo (racks A01, A02) and site North (rack N01)."""

from __future__ import annotations

import pytest
from django.test import Client

from fleet.models import Rack, Site
from tests.support import people, roles
from tests.support.capacity_rows import operator_of_demo, seed_hours

pytestmark = pytest.mark.django_db

fast_passwords = people.fast_passwords  # autouse
sites = roles.demo_and_north
URL = "/api/capacity/answer"


@pytest.fixture
def a01(sites: tuple[Site, Site]) -> int:
    # the demo's 45 kW budget, two 80 A feeds (46.0 kW with either lost)
    seed_hours("A01", [30e3] * 24)
    return Rack.objects.get(name="A01").pk


def test_an_operator_gets_yes_or_no_with_the_binding_constraint(a01: int) -> None:
    client = operator_of_demo()
    ask: dict[str, str | int] = {"rack": a01, "model": "1U box", "watts": 4000, "units": 1}
    yes = client.get(URL, {**ask, "servers": 2}).json()
    assert (yes["answer"], yes["binding"], yes["p99_kw"]) == ("yes", "power budget", 30.0)
    power = yes["constraints"][0]
    assert (power["fits"], power["margin"]) == (3, 7.0)  # 45 − 30 − 2 × 4
    no = client.get(URL, {**ask, "servers": 4}).json()
    assert (no["answer"], no["binding"]) == ("no", "power budget")


def test_a_rack_of_a_site_the_user_may_not_see_is_not_found(sites: tuple[Site, Site]) -> None:
    n01 = Rack.objects.get(name="N01").pk
    ask: dict[str, str | int] = {"rack": n01, "servers": 1, "model": "HGX H200 8-GPU"}
    otto = operator_of_demo()
    assert otto.get(URL, ask).status_code == 404
    assert otto.get(URL, {**ask, "rack": 999_999}).status_code == 404


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"servers": "two", "model": "HGX H200 8-GPU"}, "servers"),
        ({"servers": "-1", "model": "HGX H200 8-GPU"}, "servers"),
        ({"servers": "1"}, "model"),
        ({"servers": "1", "model": "mystery", "units": "2"}, "watts"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(a01: int, query: dict[str, str], field: str) -> None:
    ask: dict[str, str | int] = {"rack": a01, **query}
    response = operator_of_demo().get(URL, ask)
    assert response.status_code == 400 and response.json()["field"] == field


def test_no_sign_in_is_a_401(a01: int) -> None:
    ask: dict[str, str | int] = {"rack": a01, "servers": 1, "model": "HGX H200 8-GPU"}
    response = Client().get(URL, ask)
    assert response.status_code == 401
