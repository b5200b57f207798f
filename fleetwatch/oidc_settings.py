"""Company sign-in (OpenID Connect) settings, read from the environment.

Unset `FLEETWATCH_OIDC_ISSUER` means company sign-in is off: nothing else here is read
and only local accounts sign in. Once it is set, a missing client id or secret, an
unknown role or a malformed role map stops the server with the variable's name
(docs/configuration.md, "Company sign-in"). Kept out of fleetwatch/settings.py so that
file adds two lines: `OIDC_SIGN_IN` and `AUTHENTICATION_BACKENDS`.

The sign-in itself (fleet/oidc/) reads `settings.OIDC_SIGN_IN`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.core.exceptions import ImproperlyConfigured

from fleetwatch.env import env_str

__all__ = (
    "ROLES",
    "SITE_ROLES",
    "Endpoints",
    "OidcSignIn",
    "RoleGrant",
    "authentication_backends",
    "oidc_from_env",
    "parse_role_map",
)

# The roles of fleet/access.py, lowest first. A role at one site is never "admin": the
# site roles are SiteRoleChoices' values (tests/fleet/test_oidc_settings.py holds them equal;
# the models cannot be imported while settings load).
ROLES = ("viewer", "operator", "admin")
SITE_ROLES = ("viewer", "operator")
SIGNING_ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "HS256")
LOCAL_BACKEND = "django.contrib.auth.backends.ModelBackend"
COMPANY_BACKEND = "fleet.oidc.backend.CompanySignInBackend"


@dataclass(frozen=True)
class RoleGrant:
    """What one group of the claim gives: a role on every site, or at one site."""

    role: str
    site_slug: str | None = None


@dataclass(frozen=True)
class Endpoints:
    """Where the provider answers; given explicitly, or read from its discovery document."""

    authorization: str
    token: str
    userinfo: str
    jwks: str


@dataclass(frozen=True)
class OidcSignIn:
    issuer: str
    client_id: str
    client_secret: str
    provider_name: str
    groups_claim: str
    username_claim: str
    scopes: str
    sign_algo: str
    role_map: dict[str, tuple[RoleGrant, ...]] = field(default_factory=dict)
    # None: discovered from <issuer>/.well-known/openid-configuration on first use.
    endpoints: Endpoints | None = None


def oidc_from_env() -> OidcSignIn | None:
    issuer = env_str("FLEETWATCH_OIDC_ISSUER").strip().rstrip("/")
    if not issuer:
        return None
    if not issuer.startswith(("https://", "http://")):
        raise ImproperlyConfigured(
            f"FLEETWATCH_OIDC_ISSUER={issuer!r}: give the provider's URL, "
            "e.g. https://login.example.com/realms/ops"
        )
    sign_algo = env_str("FLEETWATCH_OIDC_SIGN_ALGO", "RS256").strip()
    if sign_algo not in SIGNING_ALGORITHMS:
        raise ImproperlyConfigured(
            f"FLEETWATCH_OIDC_SIGN_ALGO={sign_algo!r}: use one of {', '.join(SIGNING_ALGORITHMS)}"
        )
    return OidcSignIn(
        issuer=issuer,
        client_id=_required("FLEETWATCH_OIDC_CLIENT_ID"),
        client_secret=_required("FLEETWATCH_OIDC_CLIENT_SECRET"),
        provider_name=env_str("FLEETWATCH_OIDC_PROVIDER_NAME").strip() or "your company account",
        groups_claim=env_str("FLEETWATCH_OIDC_GROUPS_CLAIM").strip() or "groups",
        username_claim=env_str("FLEETWATCH_OIDC_USERNAME_CLAIM").strip() or "preferred_username",
        scopes=" ".join(env_str("FLEETWATCH_OIDC_SCOPES", "openid email profile").split()),
        sign_algo=sign_algo,
        role_map=parse_role_map(env_str("FLEETWATCH_OIDC_ROLE_MAP")),
        endpoints=_explicit_endpoints(needs_jwks=not sign_algo.startswith("HS")),
    )


def authentication_backends(oidc: OidcSignIn | None) -> list[str]:
    """Local accounts always; company sign-in beside them when configured."""
    return [LOCAL_BACKEND, COMPANY_BACKEND] if oidc else [LOCAL_BACKEND]


def parse_role_map(raw: str) -> dict[str, tuple[RoleGrant, ...]]:
    """`gpu-admins=admin,gpu-ops=operator,dc-lon-ops=operator@lon1` → group → grants.

    Entries are separated by commas or new lines; a group may be named more than once (a
    role at several sites). The group is everything before the last "=", so names that
    contain "=" still work; names that contain a comma cannot be mapped."""
    grants: dict[str, list[RoleGrant]] = {}
    for entry in (e.strip() for e in raw.replace("\n", ",").split(",")):
        if not entry:
            continue
        group, sep, target = (part.strip() for part in entry.rpartition("="))
        if not sep or not group or not target:
            raise _bad_map(entry, "write group=role or group=role@site-slug")
        grants.setdefault(group, []).append(_grant(entry, target))
    return {group: tuple(found) for group, found in grants.items()}


def _grant(entry: str, target: str) -> RoleGrant:
    role, at, site_slug = (part.strip() for part in target.partition("@"))
    if role not in ROLES:
        raise _bad_map(entry, f"the role must be one of {', '.join(ROLES)}")
    if not at:
        return RoleGrant(role)
    if not site_slug:
        raise _bad_map(entry, "name the site's slug after '@'")
    if role not in SITE_ROLES:
        raise _bad_map(entry, "a role at one site is viewer or operator; admin is fleet-wide")
    return RoleGrant(role, site_slug)


def _bad_map(entry: str, why: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"FLEETWATCH_OIDC_ROLE_MAP entry {entry!r}: {why}")


def _required(name: str) -> str:
    value = env_str(name).strip()
    if not value:
        raise ImproperlyConfigured(f"{name} is required when FLEETWATCH_OIDC_ISSUER is set")
    return value


ENDPOINT_VARIABLES = {
    "authorization": "FLEETWATCH_OIDC_AUTHORIZATION_ENDPOINT",
    "token": "FLEETWATCH_OIDC_TOKEN_ENDPOINT",
    "userinfo": "FLEETWATCH_OIDC_USERINFO_ENDPOINT",
    "jwks": "FLEETWATCH_OIDC_JWKS_URI",
}


def _explicit_endpoints(*, needs_jwks: bool) -> Endpoints | None:
    """All the endpoints from the environment (for a provider without discovery), or None."""
    given = {key: env_str(name).strip() for key, name in ENDPOINT_VARIABLES.items()}
    if not any(given.values()):
        return None
    missing = [
        ENDPOINT_VARIABLES[key]
        for key, value in given.items()
        if not value and (key != "jwks" or needs_jwks)
    ]
    if missing:
        raise ImproperlyConfigured(
            f"{', '.join(missing)} must be set too: give every endpoint, or none to use "
            "the issuer's discovery document"
        )
    return Endpoints(**given)
