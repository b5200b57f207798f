"""Closed by default (fleet/access.py, dashboard/no_role.py): a signed-in person with no
role sees no site and every page tells them whom to ask; roles only ever add access, so
removing someone's last site role leaves them with nothing, not with everything.

The cast of the role tests (tests/support/roles.py): site "Demo datacentre" (racks A01, A02) and
site "North" (rack N01)."""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import User
from django.test import Client

from dashboard import consumers
from fleet.access import can_operate, visible_site_ids
from fleet.models import Rack, Site, SiteRole
from tests.support import people, roles
from tests.support.django_data import COMMITS
from tests.support.live_sockets import closed_with, live_paths, socket
from tests.support.roles import firing, person, rack_url, signed_in

pytestmark = pytest.mark.django_db

NO_ACCESS = "No access yet"


fast_passwords = people.fast_passwords  # autouse
sites = roles.demo_and_north


def test_someone_with_no_role_sees_no_site_and_operates_nowhere(sites: tuple[Site, Site]) -> None:
    pat = person("pat")
    assert visible_site_ids(pat) == set()
    assert not can_operate(pat)


def test_every_page_shows_someone_with_no_role_only_whom_to_ask(
    sites: tuple[Site, Site],
) -> None:
    demo, north = sites
    firing(demo, "A01")
    firing(north, "N01")
    pat = signed_in(person("pat"))
    for path in ("/", rack_url("N01"), "/cooling/", "/power/", "/alerts/", "/admin/"):
        answer = pat.get(path)
        page = answer.content.decode()
        assert answer.status_code == 403, path
        assert NO_ACCESS in page and "pat" in page and "sign out" in page, path
        assert "N01" not in page and "A01" not in page and "firing" not in page, path
    rack_id = Rack.objects.values_list("id", flat=True).first()
    history = pat.get(f"/api/v1/history?kind=rack&rack_id={rack_id}")
    assert history.status_code == 403 and "no role yet" in history.json()["error"]["reason"]


def test_the_page_names_the_configured_contact(sites: tuple[Site, Site], settings: Any) -> None:
    settings.ACCESS_CONTACT = "the NOC (#dc-ops on Slack)"
    page = signed_in(person("pat")).get("/").content.decode()
    assert "ask the NOC (#dc-ops on Slack)" in page


def test_without_a_contact_the_page_names_the_admins(sites: tuple[Site, Site]) -> None:
    User.objects.create_superuser("root", "root@example.com", "pw", first_name="Ruth")
    ada = person("ada", groups=("Admins",))
    ada.email = "ada@example.com"
    ada.save()
    person("wes", groups=("Viewers",))  # not an admin: not named
    page = signed_in(person("pat")).get("/").content.decode()
    assert "Ruth &lt;root@example.com&gt;" in page and "ada &lt;ada@example.com&gt;" in page
    assert "<li>wes" not in page


def test_someone_with_no_role_can_still_sign_out(sites: tuple[Site, Site]) -> None:
    pat = signed_in(person("pat"))
    assert pat.post("/admin/logout/").status_code == 200
    assert pat.get("/").status_code == 302  # signed out: back to the sign-in page


@COMMITS  # the sockets read from other threads
async def test_live_sockets_refuse_someone_with_no_role(sites: tuple[Site, Site]) -> None:
    demo, _ = sites
    pat = await database_sync_to_async(person)("pat")
    rack_id = await Rack.objects.filter(hall__site=demo).values_list("id", flat=True).afirst()
    assert rack_id is not None
    for path in live_paths(demo.id, rack_id):
        assert await closed_with(socket(path, pat)) == consumers.CLOSE_NOT_ALLOWED, path


def test_removing_the_last_site_role_takes_access_away(sites: tuple[Site, Site]) -> None:
    vic = person("vic", north="viewer")
    assert signed_in(vic).get(rack_url("N01")).status_code == 200
    SiteRole.objects.filter(user=vic).delete()
    client = signed_in(User.objects.get(pk=vic.pk))
    for path in (rack_url("N01"), rack_url("A01"), "/alerts/"):
        answer = client.get(path)
        assert answer.status_code == 403 and NO_ACCESS in answer.content.decode(), path


def test_a_stranger_is_sent_to_sign_in_and_an_api_caller_told_to(
    sites: tuple[Site, Site],
) -> None:
    page = Client().get("/alerts/")
    assert page.status_code == 302 and page["Location"] == "/admin/login/?next=/alerts/"
    api = Client().get("/api/v1/history?kind=rack&rack_id=1")
    assert api.status_code == 401 and api.json()["error"]["reason"] == "sign in first"
