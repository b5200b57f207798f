"""Starting company sign-in, and taking the provider's answer.

Whatever goes wrong on the way (the provider unreachable, a refused account, a sign-in
started in another session) ends on the sign-in page with a sentence saying so, and is
logged; local sign-in stays there beside it."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlencode

import jwt
import requests
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.views import View
from mozilla_django_oidc.views import (  # type: ignore[import-untyped]
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from fleet.oidc.backend import mozilla_setting, refusal
from fleet.oidc.discovery import ProviderUnavailable, provider, sign_in_settings

__all__ = ("FinishCompanySignIn", "StartCompanySignIn")

log = logging.getLogger(__name__)


class StartCompanySignIn(OIDCAuthenticationRequestView):  # type: ignore[misc]
    """Sends the browser to the provider, with state, nonce and a PKCE challenge."""

    get_settings = staticmethod(mozilla_setting)

    def __init__(self, **kwargs: Any) -> None:
        # The library's __init__ reads the endpoints; reading them in get() lets an
        # unreachable provider be answered with a page instead of an error.
        View.__init__(self, **kwargs)

    def get(self, request: HttpRequest) -> HttpResponse:
        oidc = sign_in_settings()
        try:
            self.OIDC_OP_AUTH_ENDPOINT = provider(oidc).endpoints.authorization
        except ProviderUnavailable as exc:
            log.warning("company sign-in: provider unavailable: %s", exc)
            return back_to_sign_in(
                request, f"{oidc.provider_name} could not be reached; try again shortly."
            )
        self.OIDC_RP_CLIENT_ID = oidc.client_id
        response: HttpResponse = super().get(request)
        return response


class FinishCompanySignIn(OIDCAuthenticationCallbackView):  # type: ignore[misc]
    """The provider's redirect back: the code is exchanged and the person signed in."""

    get_settings = staticmethod(mozilla_setting)

    def get(self, request: HttpRequest) -> HttpResponse:
        try:
            response: HttpResponse = super().get(request)
        except (
            ProviderUnavailable,
            requests.RequestException,
            jwt.PyJWTError,
            SuspiciousOperation,
        ) as exc:
            log.warning("company sign-in failed: %s", exc)
            return back_to_sign_in(request, "Company sign-in did not finish; please start again.")
        return response

    def login_failure(self) -> HttpResponse:
        request = self.request
        why = refusal(request)
        if why is None and request.GET.get("error"):
            why = request.GET.get("error_description") or request.GET["error"]
        return back_to_sign_in(
            request, f"Company sign-in did not finish: {why or 'it was not accepted'}."
        )


def back_to_sign_in(request: HttpRequest, sentence: str) -> HttpResponse:
    messages.error(request, sentence)
    next_url = request.session.get("oidc_login_next")
    query = f"?{urlencode({'next': next_url})}" if next_url else ""
    return HttpResponseRedirect(f"{settings.LOGIN_URL}{query}")
