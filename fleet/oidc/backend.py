"""The authentication backend behind company sign-in: mozilla-django-oidc's code flow,
with Fleetwatch's account and role rules.

- An account is found by the username claim (`FLEETWATCH_OIDC_USERNAME_CLAIM`, default
  `preferred_username`, else `email`) and made on first sign-in, with no password.
- A local account of that name that has a password is never taken over: the sign-in is
  refused, and an admin decides (docs/configuration.md, "Company sign-in").
- The ID token must come from the configured issuer for this client, and the userinfo
  answer must be about the same subject; both are checked here, since the library checks
  only the signature and the nonce.
- Roles are set from the group claim at every sign-in (roles.py).
"""

from __future__ import annotations

import logging
from typing import Any, NoReturn

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from django.db import IntegrityError, transaction
from django.http import HttpRequest
from mozilla_django_oidc.auth import OIDCAuthenticationBackend  # type: ignore[import-untyped]
from mozilla_django_oidc.utils import import_from_settings  # type: ignore[import-untyped]

from fleet.oidc import CALLBACK_URL_NAME
from fleet.oidc.discovery import HTTP_TIMEOUT_S, Provider, provider, sign_in_settings
from fleet.oidc.roles import granted_roles, groups_in_claim, sync_roles
from fleetwatch.oidc_settings import OidcSignIn

__all__ = ("CompanySignInBackend", "Refused", "mozilla_setting", "refusal")

log = logging.getLogger(__name__)

_REFUSAL = "company_sign_in_refusal"


class Refused(SuspiciousOperation):
    """A sign-in the provider vouched for that Fleetwatch turns down; says why, to the person."""


def refusal(request: HttpRequest) -> str | None:
    """Why the backend turned this request's sign-in down, if it did."""
    reason = getattr(request, _REFUSAL, None)
    return reason if isinstance(reason, str) else None


def mozilla_setting(name: str, *default: Any) -> Any:
    """mozilla-django-oidc's settings, from OIDC_SIGN_IN rather than more Django settings."""
    oidc: OidcSignIn | None = settings.OIDC_SIGN_IN
    if oidc is not None:
        ours = {
            "OIDC_RP_CLIENT_ID": oidc.client_id,
            "OIDC_RP_CLIENT_SECRET": oidc.client_secret,
            "OIDC_RP_SIGN_ALGO": oidc.sign_algo,
            "OIDC_RP_SCOPES": oidc.scopes,
            "OIDC_USE_PKCE": True,
            "OIDC_TIMEOUT": HTTP_TIMEOUT_S,
            "OIDC_AUTHENTICATION_CALLBACK_URL": CALLBACK_URL_NAME,
        }
        if name in ours:
            return ours[name]
    return import_from_settings(name, *default)


class CompanySignInBackend(OIDCAuthenticationBackend):  # type: ignore[misc]
    get_settings = staticmethod(mozilla_setting)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The library's __init__ reads the endpoints. Django makes every backend for every
        # sign-in, password ones too, so that would fetch discovery (and fail with the
        # provider down) for local accounts; they are read in authenticate() instead.
        self.UserModel = get_user_model()

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> Any:
        if request is None or "code" not in request.GET or "state" not in request.GET:
            return None
        self.oidc = sign_in_settings()
        self.provider: Provider = provider(self.oidc)
        endpoints = self.provider.endpoints
        self.OIDC_OP_TOKEN_ENDPOINT = endpoints.token
        self.OIDC_OP_USER_ENDPOINT = endpoints.userinfo
        self.OIDC_OP_JWKS_ENDPOINT = endpoints.jwks
        self.OIDC_RP_CLIENT_ID = self.oidc.client_id
        self.OIDC_RP_CLIENT_SECRET = self.oidc.client_secret
        self.OIDC_RP_SIGN_ALGO = self.oidc.sign_algo
        self.OIDC_RP_IDP_SIGN_KEY = None
        return super().authenticate(request, **kwargs)

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> Any:
        self._check_issued_to_us(payload)
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if userinfo.get("sub") != payload.get("sub"):
            self._refuse("the provider's userinfo is about someone else than its ID token")
        claims = {**payload, **userinfo}
        groups = groups_in_claim(claims, self.oidc.groups_claim)
        granted = granted_roles(groups, self.oidc.role_map)
        with transaction.atomic():
            user = self._account(claims)
            sync_roles(user, granted)
        log.info(
            "company sign-in: %s, groups %s: role everywhere %s, at sites %s",
            user.username,
            groups,
            granted.everywhere,
            granted.at_sites,
        )
        return user

    def _check_issued_to_us(self, payload: dict[str, Any]) -> None:
        issuer = str(payload.get("iss", "")).rstrip("/")
        if issuer != self.provider.issuer:
            self._refuse(f"the ID token comes from {issuer!r}, not {self.provider.issuer!r}")
        audience = payload.get("aud")
        audiences = [audience] if isinstance(audience, str) else audience
        if not isinstance(audiences, list) or self.oidc.client_id not in audiences:
            self._refuse("the ID token was issued to another client")

    def _account(self, claims: dict[str, Any]) -> Any:
        username = claims.get(self.oidc.username_claim) or claims.get("email")
        max_length = self.UserModel._meta.get_field("username").max_length or 150
        if not isinstance(username, str) or not username.strip() or len(username) > max_length:
            self._refuse(
                f"the provider sent no usable {self.oidc.username_claim!r} or 'email' claim"
            )
        user = self.UserModel.objects.filter(username=username).first()
        if user is None:
            try:
                with transaction.atomic():
                    user = self.UserModel.objects.create_user(username)  # no password
            except IntegrityError:  # the same person's first sign-in in another tab
                user = self.UserModel.objects.get(username=username)
        elif user.has_usable_password():
            self._refuse(
                f"Fleetwatch has a local account named {username!r}, which signs in with a "
                "password; an admin must remove its password before company sign-in may use it"
            )
        _copy_profile(user, claims)
        return user

    def _refuse(self, why: str) -> NoReturn:
        setattr(self.request, _REFUSAL, why)
        raise Refused(why)


def _copy_profile(user: Any, claims: dict[str, Any]) -> None:
    """Name and email as the provider has them now."""
    changed = []
    for field_name, claim in (
        ("first_name", "given_name"),
        ("last_name", "family_name"),
        ("email", "email"),
    ):
        value = claims.get(claim)
        max_length = user._meta.get_field(field_name).max_length
        if (
            isinstance(value, str)
            and len(value) <= max_length
            and getattr(user, field_name) != value
        ):
            setattr(user, field_name, value)
            changed.append(field_name)
    if changed:
        user.save(update_fields=changed)
