"""/oidc/authenticate/ and /oidc/callback/ (the redirect URI to register at the provider);
no routes at all while company sign-in is off. Both answer without a sign-in: they are
how one signs in (the state kept in the session guards the callback)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.urls import URLPattern, path

from fleet.oidc import CALLBACK_URL_NAME, START_URL_NAME


def _routes() -> list[URLPattern]:
    # Imported only when configured: with company sign-in off, nothing loads the library.
    from fleet.oidc.views import FinishCompanySignIn, StartCompanySignIn

    return [
        path(
            "authenticate/", login_not_required(StartCompanySignIn.as_view()), name=START_URL_NAME
        ),
        path(
            "callback/", login_not_required(FinishCompanySignIn.as_view()), name=CALLBACK_URL_NAME
        ),
    ]


urlpatterns: list[URLPattern] = _routes() if settings.OIDC_SIGN_IN else []
