"""The provider's endpoints: as configured, or from its discovery document, fetched on
first use and kept an hour. Never at start-up, so an unreachable provider stops only
company sign-in, not the server or local sign-in."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import requests
from django.conf import settings

from fleetwatch.oidc_settings import Endpoints, OidcSignIn

__all__ = ("HTTP_TIMEOUT_S", "Provider", "ProviderUnavailable", "provider", "sign_in_settings")

HTTP_TIMEOUT_S = 10.0
DISCOVERY_TTL_S = 3600.0
_lock = threading.Lock()
_discovered: dict[str, tuple[float, Provider]] = {}


class ProviderUnavailable(Exception):
    """The provider did not answer, or answered with something that is not OpenID Connect."""


@dataclass(frozen=True)
class Provider:
    issuer: str
    endpoints: Endpoints


def sign_in_settings() -> OidcSignIn:
    oidc: OidcSignIn | None = settings.OIDC_SIGN_IN
    if oidc is None:
        raise ProviderUnavailable("company sign-in is not configured")
    return oidc


def provider(oidc: OidcSignIn) -> Provider:
    if oidc.endpoints is not None:
        return Provider(oidc.issuer, oidc.endpoints)
    with _lock:
        cached = _discovered.get(oidc.issuer)
        if cached and time.monotonic() - cached[0] < DISCOVERY_TTL_S:
            return cached[1]
    found = _discover(oidc.issuer)
    with _lock:
        _discovered[oidc.issuer] = (time.monotonic(), found)
    return found


def _discover(issuer: str) -> Provider:
    url = f"{issuer}/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=HTTP_TIMEOUT_S)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise ProviderUnavailable(f"{url}: {exc}") from exc
    try:
        endpoints = Endpoints(
            authorization=str(document["authorization_endpoint"]),
            token=str(document["token_endpoint"]),
            userinfo=str(document["userinfo_endpoint"]),
            jwks=str(document["jwks_uri"]),
        )
        said_issuer = str(document["issuer"]).rstrip("/")
    except (KeyError, TypeError) as exc:
        raise ProviderUnavailable(f"{url} lacks {exc}") from exc
    # OpenID Connect Discovery 1.0, section 4.3: the document must name the issuer asked.
    if said_issuer != issuer:
        raise ProviderUnavailable(f"{url} names issuer {said_issuer!r}, not {issuer!r}")
    return Provider(issuer, endpoints)
