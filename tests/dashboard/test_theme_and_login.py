"""Fleetwatch's look: its name on the sign-in page and the admin (never "Django
administration"), one sign-in for every account, a favicon, a light theme beside the dark
one, and admin columns that say their units."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import SourceToken, hash_token
from tests.support import people
from tests.support.people import viewer

pytestmark = pytest.mark.django_db


fast_passwords = people.fast_passwords  # autouse


def test_the_sign_in_page_says_fleetwatch_not_django(client: Client) -> None:
    page = client.get("/admin/login/?next=/alerts/").content.decode()
    assert "Sign in to Fleetwatch" in page and "<title>Sign in · Fleetwatch</title>" in page
    assert "Django" not in page
    assert 'name="csrfmiddlewaretoken"' in page and 'id="id_username"' in page
    assert "favicon.svg" in page


def test_a_viewer_signs_in_on_the_same_page_and_lands_where_they_were_going(
    client: Client,
) -> None:
    viewer("vic")
    answer = client.post(
        "/admin/login/?next=/alerts/", {"username": "vic", "password": "pw", "next": "/alerts/"}
    )
    assert answer.status_code == 302 and answer["Location"] == "/alerts/"
    assert client.get("/alerts/").status_code == 200


def test_signing_in_without_a_destination_lands_on_the_fleet_overview(client: Client) -> None:
    viewer("vic")
    answer = client.post("/admin/login/", {"username": "vic", "password": "pw"})
    assert answer.status_code == 302 and answer["Location"] == "/"


def test_every_page_has_a_sign_out_that_ends_the_session(client: Client) -> None:
    client.force_login(viewer("vic"))
    page = client.get("/alerts/").content.decode()
    assert 'action="/admin/logout/"' in page and "sign out" in page
    assert "You are signed out of Fleetwatch" in client.post("/admin/logout/").content.decode()
    assert client.get("/alerts/").status_code == 302


def test_a_wrong_password_is_said_on_the_sign_in_page(client: Client) -> None:
    User.objects.create_user("vic", password="pw")
    answer = client.post("/admin/login/", {"username": "vic", "password": "nope"})
    assert answer.status_code == 200
    assert "Please enter a correct username and password" in answer.content.decode()
    assert "_auth_user_id" not in client.session


def test_the_admin_carries_fleetwatchs_name_and_colours(admin_client: Client) -> None:
    page = admin_client.get("/admin/").content.decode()
    assert "Fleetwatch inventory" in page and "| Fleetwatch</title>" in page
    assert "Django administration" not in page and "Django site admin" not in page
    assert "dashboard/fleet.css" in page and "← Fleet dashboard" in page


def test_the_favicon_is_served_as_svg(client: Client) -> None:
    answer = client.get("/static/dashboard/favicon.svg")
    assert answer.status_code == 200
    assert answer["Content-Type"].startswith("image/svg+xml")
    assert b"<svg" in b"".join(answer.streaming_content)  # type: ignore[attr-defined]


def test_pages_offer_a_theme_toggle_over_a_light_and_a_dark_theme(admin_client: Client) -> None:
    page = admin_client.get("/alerts/").content.decode()
    assert 'id="theme-toggle"' in page and 'localStorage.getItem("theme")' in page
    css = b"".join(admin_client.get("/static/dashboard/fleet.css").streaming_content).decode()  # type: ignore[attr-defined]
    assert "@media (prefers-color-scheme: light)" in css
    assert 'html[data-theme="light"]' in css and 'html[data-theme="dark"]' in css
    assert "font-size: clamp(" in css  # text grows from 1280 px screens to 4K walls


def test_admin_columns_say_units_and_a_healthy_token_reads_in_use(admin_client: Client) -> None:
    site = seed_demo_site("demo", DEMO_RACKS[:2], gpus_per_node=1)
    SourceToken.objects.create(
        source="node:gpu-a01-01", kind="node", site=site, token_hash=hash_token("fws_x")
    )
    loops = admin_client.get("/admin/fleet/coolingloop/").content.decode()
    assert "Capacity (kW)" in loops and "Rated flow (L/min)" in loops
    feeds = admin_client.get("/admin/fleet/powerfeed/").content.decode()
    assert "Voltage (V)" in feeds and "Breaker (A)" in feeds and "Max utilisation (%)" in feeds
    gpus = admin_client.get("/admin/fleet/gpu/").content.decode()
    assert "Slowdown at (°C)" in gpus and "Power limit (W)" in gpus
    tokens = admin_client.get("/admin/fleet/sourcetoken/").content.decode()
    assert "in use" in tokens
    assert "icon-no.svg" not in tokens  # no red cross on a token that works
