"""Company sign-in's settings and role rules, without a provider: the environment is read
strictly (fleetwatch/oidc_settings.py), a group claim maps to roles (fleet/oidc/roles.py),
and an ID token for another issuer or client is refused (fleet/oidc/backend.py). The
sign-in itself, against a real provider: test_oidc_sign_in.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, RequestFactory

from fleet.models import Site, SiteRole, SiteRoleChoices
from fleet.oidc.backend import CompanySignInBackend, Refused, refusal
from fleet.oidc.discovery import Provider
from fleet.oidc.roles import Granted, granted_roles, groups_in_claim, sync_roles
from fleetwatch.oidc_settings import (
    SITE_ROLES,
    Endpoints,
    OidcSignIn,
    RoleGrant,
    authentication_backends,
    oidc_from_env,
    parse_role_map,
)

REQUIRED = {
    "FLEETWATCH_OIDC_ISSUER": "https://login.example.com/realms/ops/",
    "FLEETWATCH_OIDC_CLIENT_ID": "fleetwatch",
    "FLEETWATCH_OIDC_CLIENT_SECRET": "s3cret",
}


OIDC_VARIABLES = (
    *("ISSUER", "CLIENT_ID", "CLIENT_SECRET", "ROLE_MAP", "SIGN_ALGO", "GROUPS_CLAIM"),
    *("AUTHORIZATION_ENDPOINT", "TOKEN_ENDPOINT", "USERINFO_ENDPOINT", "JWKS_URI"),
    *("PROVIDER_NAME", "USERNAME_CLAIM", "SCOPES"),
)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in OIDC_VARIABLES:
        monkeypatch.delenv(f"FLEETWATCH_OIDC_{name}", raising=False)
    return monkeypatch


def test_without_an_issuer_company_sign_in_is_off_and_only_passwords_sign_in(
    env: pytest.MonkeyPatch,
) -> None:
    env.setenv("FLEETWATCH_OIDC_CLIENT_ID", "ignored while off")

    assert oidc_from_env() is None
    assert authentication_backends(None) == ["django.contrib.auth.backends.ModelBackend"]


def test_the_issuer_and_client_come_from_the_environment_with_defaults(
    env: pytest.MonkeyPatch,
) -> None:
    for name, value in REQUIRED.items():
        env.setenv(name, value)

    oidc = oidc_from_env()

    assert oidc is not None
    assert oidc.issuer == "https://login.example.com/realms/ops"  # one spelling, no slash
    assert (oidc.groups_claim, oidc.username_claim) == ("groups", "preferred_username")
    assert (oidc.sign_algo, oidc.scopes) == ("RS256", "openid email profile")
    assert oidc.endpoints is None  # discovered on first use
    assert authentication_backends(oidc)[-1] == "fleet.oidc.backend.CompanySignInBackend"


@pytest.mark.parametrize("missing", ["FLEETWATCH_OIDC_CLIENT_ID", "FLEETWATCH_OIDC_CLIENT_SECRET"])
def test_an_issuer_without_its_client_stops_the_server_naming_what_is_missing(
    env: pytest.MonkeyPatch, missing: str
) -> None:
    for name, value in REQUIRED.items():
        if name != missing:
            env.setenv(name, value)

    with pytest.raises(ImproperlyConfigured, match=missing):
        oidc_from_env()


def test_explicit_endpoints_are_all_or_nothing(env: pytest.MonkeyPatch) -> None:
    for name, value in REQUIRED.items():
        env.setenv(name, value)
    env.setenv("FLEETWATCH_OIDC_TOKEN_ENDPOINT", "https://login.example.com/token")

    with pytest.raises(ImproperlyConfigured, match="FLEETWATCH_OIDC_AUTHORIZATION_ENDPOINT"):
        oidc_from_env()

    env.setenv("FLEETWATCH_OIDC_AUTHORIZATION_ENDPOINT", "https://login.example.com/auth")
    env.setenv("FLEETWATCH_OIDC_USERINFO_ENDPOINT", "https://login.example.com/me")
    env.setenv("FLEETWATCH_OIDC_SIGN_ALGO", "HS256")  # signed with the secret: no keys needed
    oidc = oidc_from_env()
    assert oidc is not None and oidc.endpoints is not None
    assert oidc.endpoints.userinfo == "https://login.example.com/me"


def test_an_unknown_signing_algorithm_is_an_error(env: pytest.MonkeyPatch) -> None:
    for name, value in REQUIRED.items():
        env.setenv(name, value)
    env.setenv("FLEETWATCH_OIDC_SIGN_ALGO", "none")

    with pytest.raises(ImproperlyConfigured, match="FLEETWATCH_OIDC_SIGN_ALGO"):
        oidc_from_env()


def test_the_role_map_reads_roles_everywhere_and_at_one_site() -> None:
    raw = "gpu-admins=admin, gpu-ops=operator,\ngpu-viewers=viewer,dc-lon-ops=operator@lon1,"
    raw += "cn=ops=viewer@par1,dc-lon-ops=viewer@par1"

    assert parse_role_map(raw) == {
        "gpu-admins": (RoleGrant("admin"),),
        "gpu-ops": (RoleGrant("operator"),),
        "gpu-viewers": (RoleGrant("viewer"),),
        "dc-lon-ops": (RoleGrant("operator", "lon1"), RoleGrant("viewer", "par1")),
        "cn=ops": (RoleGrant("viewer", "par1"),),  # split at the last "="
    }
    assert parse_role_map("") == {}


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("gpu-ops", "group=role"),
        ("=viewer", "group=role"),
        ("gpu-ops=", "group=role"),
        ("gpu-ops=superuser", "one of viewer, operator, admin"),
        ("gpu-ops=operator@", "slug"),
        ("lon-admins=admin@lon1", "admin is fleet-wide"),
    ],
)
def test_a_bad_role_map_entry_stops_the_server_quoting_it(entry: str, why: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=f"{entry!r}.*{why}"):
        parse_role_map(f"gpu-viewers=viewer,{entry}")


def test_site_roles_are_the_ones_a_site_role_row_holds() -> None:
    assert set(SITE_ROLES) == set(SiteRoleChoices.values)


ROLE_MAP = parse_role_map(
    "gpu-admins=admin,gpu-ops=operator,gpu-viewers=viewer,lon-ops=operator@lon1,lon-view=viewer@lon1"
)


def test_the_highest_role_wins_everywhere_and_at_each_site() -> None:
    granted = granted_roles(["gpu-viewers", "gpu-ops", "lon-view", "lon-ops", "other"], ROLE_MAP)

    assert granted == Granted("operator", {"lon1": "operator"})
    assert granted_roles(["other"], ROLE_MAP) == Granted(None, {})


@pytest.mark.parametrize(
    ("claim", "groups"),
    [(["a", "b"], ["a", "b"]), ("a", ["a"]), (None, []), ([1, "a", None], ["a"]), ({}, [])],
)
def test_the_group_claim_is_a_list_or_a_name_and_anything_else_is_no_group(
    claim: Any, groups: list[str]
) -> None:
    assert groups_in_claim({"groups": claim}, "groups") == groups


@pytest.mark.django_db
def test_signing_in_again_leaves_exactly_the_roles_the_claim_grants_now(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lon = Site.objects.create(slug="lon1", name="London")
    par = Site.objects.create(slug="par1", name="Paris")
    person = User.objects.create_user("kim")
    person.groups.add(Group.objects.get(name="Admins"))
    teams = Group.objects.create(name="Night shift")  # not a role: left alone
    person.groups.add(teams)
    SiteRole.objects.create(user=person, site=par, role="operator")

    sync_roles(person, Granted("viewer", {"lon1": "operator", "nowhere": "viewer"}))

    assert set(person.groups.values_list("name", flat=True)) == {"Viewers", "Night shift"}
    assert list(SiteRole.objects.filter(user=person).values_list("site", "role")) == [
        (lon.id, "operator")
    ]
    assert "'nowhere', which does not exist" in caplog.text

    sync_roles(person, Granted(None, {}))
    assert list(person.groups.values_list("name", flat=True)) == ["Night shift"]
    assert not SiteRole.objects.filter(user=person).exists()


OIDC = OidcSignIn(
    issuer="https://login.example.com",
    client_id="fleetwatch",
    client_secret="s3cret",
    provider_name="Example SSO",
    groups_claim="groups",
    username_claim="preferred_username",
    scopes="openid",
    sign_algo="RS256",
)


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        ({"iss": "https://evil.example.com", "aud": "fleetwatch"}, "comes from"),
        ({"iss": "https://login.example.com", "aud": ["other-app"]}, "another client"),
        ({"iss": "https://login.example.com"}, "another client"),
    ],
)
def test_an_id_token_for_another_issuer_or_client_is_refused(
    payload: dict[str, Any], why: str
) -> None:
    backend = CompanySignInBackend()
    backend.oidc = OIDC
    backend.provider = Provider(OIDC.issuer, Endpoints("a", "t", "u", "j"))
    backend.request = RequestFactory().get("/oidc/callback/")

    with pytest.raises(Refused, match=why):
        backend.get_or_create_user("access", "id", {"sub": "1", **payload})
    assert why in (refusal(backend.request) or "")


@pytest.mark.django_db
def test_the_sign_in_page_has_no_company_button_while_it_is_off(client: Client) -> None:
    page = client.get("/admin/login/").content.decode()

    assert "Sign in with" not in page and 'name="password"' in page
