"""Company sign-in against a real OpenID Connect provider (django-oidc-provider, in its own
process: tests/support/oidc_provider/), through a live Fleetwatch server: the person's
groups at the provider decide their role here, at every sign-in.

The cast at the provider: vera is in gpu-viewers, otto in gpu-ops, nora in no group, dana
in demo-ops (operator at the demo site only), ivy in gpu-viewers until a test takes it
away, and lena shares her name with a local Fleetwatch account that has a password.

Embedded tier only (SQLite): the sign-in does not touch what the services tier changes.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.hashers import make_password
from django.utils import timezone

from tests.support.oidc_provider import OidcProvider, sign_in_with_company_account
from tests.support.server import FleetServer

ROLE_MAP = "gpu-admins=admin,gpu-ops=operator,gpu-viewers=viewer,demo-ops=operator@demo"
PEOPLE = {
    "vera": ["gpu-viewers"],
    "otto": ["gpu-ops"],
    "nora": [],
    "dana": ["demo-ops", "unmapped-group"],
    "ivy": ["gpu-viewers"],
    "lena": ["gpu-admins"],
}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetServer]:
    work = tmp_path_factory.mktemp("oidc")
    server = FleetServer(work / "fleet", racks=1)
    idp = OidcProvider(work / "provider", f"{server.url}/oidc/callback/", PEOPLE)
    server.extra_env.update(idp.fleetwatch_env(ROLE_MAP))
    try:
        idp.start()  # migrates its database while Fleetwatch migrates and seeds its own
        server.prepare()
        add_local_superuser(server, "lena")
        idp.wait_ready()
        server.start()
        server.idp = idp  # type: ignore[attr-defined]
        yield server
    finally:
        server.stop()
        idp.stop()


def add_local_superuser(server: FleetServer, username: str) -> None:
    """A local account with a password, written straight in (a manage.py run costs seconds)."""
    server.execute(
        "INSERT INTO auth_user (username, password, is_superuser, is_staff, is_active,"
        " first_name, last_name, email, date_joined) VALUES (?, ?, 1, 1, 1, '', '', '', ?)",
        (username, make_password("local-password-1"), timezone.now().isoformat()),
    )


def fleet_roles(server: FleetServer, username: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The person's role groups and (site slug, role) rows in Fleetwatch's database."""
    groups = server.query(
        "SELECT g.name FROM auth_group g JOIN auth_user_groups ug ON ug.group_id = g.id"
        " JOIN auth_user u ON u.id = ug.user_id WHERE u.username = ? ORDER BY g.name",
        (username,),
    )
    sites = server.query(
        "SELECT s.slug, r.role FROM fleet_siterole r JOIN fleet_site s ON s.id = r.site_id"
        " JOIN auth_user u ON u.id = r.user_id WHERE u.username = ? ORDER BY s.slug",
        (username,),
    )
    return [name for (name,) in groups], [(slug, role) for slug, role in sites]


def test_a_viewer_group_signs_in_as_a_viewer_of_every_site(fleet: FleetServer) -> None:
    browser, page = sign_in_with_company_account(fleet.url, "vera")

    assert page.status_code == 200 and page.url == f"{fleet.url}/"
    assert "Demo datacentre" in page.text
    assert fleet_roles(fleet, "vera") == (["Viewers"], [])
    alerts = browser.get(f"{fleet.url}/alerts/", timeout=10)
    assert alerts.status_code == 200 and "Add a silence" not in alerts.text


def test_an_operator_group_signs_in_as_an_operator(fleet: FleetServer) -> None:
    _, page = sign_in_with_company_account(fleet.url, "otto", next_path="/alerts/")

    assert page.status_code == 200 and page.url == f"{fleet.url}/alerts/"
    assert "Add a silence" in page.text
    assert fleet_roles(fleet, "otto") == (["Operators"], [])


def test_no_group_signs_in_to_the_page_saying_whom_to_ask(fleet: FleetServer) -> None:
    browser, page = sign_in_with_company_account(fleet.url, "nora")

    assert page.status_code == 403 and page.url == f"{fleet.url}/"
    assert "No access yet" in page.text and "nora" in page.text
    assert "Demo datacentre" not in page.text
    assert fleet_roles(fleet, "nora") == ([], [])
    # Signed in, not sent back to the sign-in page: every page says the same.
    rack = browser.get(f"{fleet.url}/alerts/", timeout=10)
    assert rack.status_code == 403 and "No access yet" in rack.text


def test_a_site_group_makes_an_operator_at_that_site_only(fleet: FleetServer) -> None:
    _, page = sign_in_with_company_account(fleet.url, "dana", next_path="/alerts/")

    assert page.status_code == 200 and "Add a silence" in page.text
    assert fleet_roles(fleet, "dana") == ([], [("demo", "operator")])


def test_a_group_removed_at_the_provider_takes_the_role_away_at_the_next_sign_in(
    fleet: FleetServer,
) -> None:
    sign_in_with_company_account(fleet.url, "ivy")
    assert fleet_roles(fleet, "ivy") == (["Viewers"], [])

    fleet.idp.set_groups("ivy", ["demo-ops"])  # type: ignore[attr-defined]
    sign_in_with_company_account(fleet.url, "ivy")
    assert fleet_roles(fleet, "ivy") == ([], [("demo", "operator")])

    fleet.idp.set_groups("ivy", [])  # type: ignore[attr-defined]
    _, page = sign_in_with_company_account(fleet.url, "ivy")
    assert fleet_roles(fleet, "ivy") == ([], [])
    assert page.status_code == 403 and "No access yet" in page.text


def test_a_local_account_with_a_password_is_not_taken_over(fleet: FleetServer) -> None:
    browser, page = sign_in_with_company_account(fleet.url, "lena")

    assert page.url.startswith(f"{fleet.url}/admin/login/")
    assert "local account named &#x27;lena&#x27;" in page.text
    assert browser.get(f"{fleet.url}/", timeout=10).url.startswith(f"{fleet.url}/admin/login/")
    # Her local superuser account kept what it had; the provider's admin group added nothing.
    assert fleet_roles(fleet, "lena") == ([], [])


def test_the_sign_in_page_offers_the_provider_beside_the_password_form(
    fleet: FleetServer,
) -> None:
    import requests

    page = requests.get(f"{fleet.url}/admin/login/?next=/power/", timeout=10).text

    assert "Sign in with Test SSO" in page
    assert 'href="/oidc/authenticate/?next=%2Fpower%2F"' in page
    assert 'name="password"' in page
