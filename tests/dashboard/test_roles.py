"""Roles per site: a viewer sees only the sites given to them, an operator acknowledges
only their sites' alerts, and only admins open the inventory (fleet/access.py).

The cast: site "Demo datacentre" (racks A01, A02) and site "North" (rack N01); vic views
North only, otto operates Demo only, ada is in the "Admins" group, wes watches every site
("Viewers" group) and operates Demo."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from fleet.access import can_administer, can_operate, can_view_site, visible_site_ids
from fleet.alerts.models import AlertInstance
from fleet.models import Site
from fleet.notifications.models import Route
from tests.support import people, roles
from tests.support.roles import firing, person, rack_url, signed_in

pytestmark = pytest.mark.django_db

WEBHOOK = "https://hooks.slack.com/services/T000/B000/sEcReTtOkEn1234"


fast_passwords = people.fast_passwords  # autouse
sites = roles.demo_and_north


def ack(client: Client, alert: AlertInstance) -> int:
    answer = client.post("/alerts/acknowledge", {"alert": alert.pk, "comment": "on it"})
    return answer.status_code


def acknowledged(alert: AlertInstance) -> bool:
    alert.refresh_from_db()
    return alert.acknowledged_at is not None


def test_the_viewers_group_sees_every_site_and_changes_nothing(sites: tuple[Site, Site]) -> None:
    wes = person("wes", groups=("Viewers",))
    assert visible_site_ids(wes) is None
    assert not can_operate(wes) and not can_administer(wes)
    assert signed_in(wes).get(rack_url("N01")).status_code == 200


def test_a_viewer_of_one_site_gets_its_pages_and_a_404_for_other_sites(
    sites: tuple[Site, Site],
) -> None:
    demo, north = sites
    vic = person("vic", north="viewer")
    assert visible_site_ids(vic) == {north.pk}
    assert can_view_site(vic, north.pk) and not can_view_site(vic, demo.pk)
    client = signed_in(vic)
    assert client.get(rack_url("N01")).status_code == 200
    assert client.get(rack_url("A01")).status_code == 404


def test_the_alerts_page_lists_only_the_sites_a_viewer_sees(sites: tuple[Site, Site]) -> None:
    demo, north = sites
    firing(demo, "A01")
    firing(north, "N01")
    Route.objects.create(name="demo-ops", webhook_url=WEBHOOK, site=demo)
    page = signed_in(person("vic", north="viewer")).get("/alerts/").content.decode()
    assert "1 firing" in page
    assert "North / N01" in page and "A01" not in page
    assert "demo-ops" not in page  # another site's route


def test_a_site_operator_acknowledges_their_sites_alert_and_not_anothers(
    sites: tuple[Site, Site],
) -> None:
    demo, north = sites
    mine, theirs = firing(demo, "A01"), firing(north, "N01")
    otto = signed_in(person("otto", groups=("Viewers",), demo="operator"))
    assert ack(otto, theirs) == 403
    assert not acknowledged(theirs)
    assert ack(otto, mine) == 302
    assert acknowledged(mine)


def test_the_page_offers_acknowledging_only_on_the_operated_sites_alerts(
    sites: tuple[Site, Site],
) -> None:
    demo, north = sites
    mine, theirs = firing(demo, "A01"), firing(north, "N01")
    page = signed_in(person("wes", groups=("Viewers",), demo="operator")).get("/alerts/")
    html = page.content.decode()
    assert "North / N01" in html  # sees every site
    assert f'name="alert" value="{mine.pk}"' in html
    assert f'name="alert" value="{theirs.pk}"' not in html


def test_a_viewer_cannot_acknowledge_sees_no_controls_and_no_webhook(
    sites: tuple[Site, Site],
) -> None:
    demo, _ = sites
    alert = firing(demo, "A01")
    Route.objects.create(name="ops", webhook_url=WEBHOOK)
    viewer = signed_in(person("vic", groups=("Viewers",)))
    html = viewer.get("/alerts/").content.decode()
    assert "Demo datacentre / A01" in html
    assert 'name="alert"' not in html and "Acknowledge selected" not in html
    assert "Add a silence" not in html and "hooks.slack.com" not in html and "sEcReT" not in html
    assert ack(viewer, alert) == 403
    assert not acknowledged(alert)


def test_the_operators_group_and_the_old_permission_both_operate_everywhere(
    sites: tuple[Site, Site],
) -> None:
    _, north = sites
    legacy = person("lee")
    legacy.user_permissions.add(Permission.objects.get(codename="change_alertinstance"))
    grouped = person("gus", groups=("Operators",))
    for user in (User.objects.get(pk=legacy.pk), grouped):
        assert can_operate(user, north.pk) and visible_site_ids(user) is None
        assert not can_administer(user)


def test_only_admins_open_the_inventory_and_see_its_link(sites: tuple[Site, Site]) -> None:
    ada = signed_in(person("ada", groups=("Admins",)))
    otto = signed_in(person("otto", groups=("Operators",)))
    assert ada.get("/admin/fleet/rack/").status_code == 200
    assert ">Inventory</a>" in ada.get("/alerts/").content.decode()
    refused = otto.get("/admin/fleet/rack/")
    assert refused.status_code == 302 and "/admin/login/" in refused["Location"]
    assert ">Inventory</a>" not in otto.get("/alerts/").content.decode()


def test_an_admin_gives_a_role_at_one_site_in_the_admin(sites: tuple[Site, Site]) -> None:
    _, north = sites
    vic = person("vic")
    ada = signed_in(person("ada", groups=("Admins",)))
    answer = ada.post(
        "/admin/fleet/siterole/add/", {"user": vic.pk, "site": north.pk, "role": "operator"}
    )
    assert answer.status_code == 302
    assert visible_site_ids(User.objects.get(pk=vic.pk)) == {north.pk}
    assert "vic — operator at North" in ada.get("/admin/fleet/siterole/").content.decode()


def test_a_persons_page_in_the_admin_lists_their_site_roles(
    sites: tuple[Site, Site], admin_client: Client
) -> None:
    vic = person("vic", north="viewer")
    page = admin_client.get(f"/admin/auth/user/{vic.pk}/change/").content.decode()
    assert "Roles at single sites (any row limits the person to those sites)" in page
    assert 'name="site_roles-0-role"' in page and 'value="viewer" selected' in page


def test_the_role_groups_come_with_the_migrations() -> None:
    operators = Group.objects.get(name="Operators")
    assert operators.permissions.filter(codename="change_alertinstance").exists()
    assert operators.permissions.filter(codename="add_silence").exists()
    assert Group.objects.get(name="Admins").permissions.filter(codename="change_rack").exists()
    assert not Group.objects.get(name="Viewers").permissions.exists()


def test_signed_out_sees_nothing_and_operates_nowhere() -> None:
    from django.contrib.auth.models import AnonymousUser

    nobody = AnonymousUser()
    assert visible_site_ids(nobody) == set()
    assert not can_operate(nobody) and not can_administer(nobody)


def test_the_fleet_page_shows_only_the_racks_of_ones_sites(sites: tuple[Site, Site]) -> None:
    """A viewer of one site gets that site's racks on the first render, not every site's."""
    north_viewer = signed_in(person("north-viewer", north="viewer"))
    page = north_viewer.get("/").content.decode()
    assert "N01" in page
    assert "A01" not in page and "A02" not in page
    everyone = signed_in(person("wes", groups=("Viewers",))).get("/").content.decode()
    assert "N01" in everyone and "A01" in everyone
