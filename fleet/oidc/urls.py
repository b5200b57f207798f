"""/oidc/authenticate/ and /oidc/callback/ (the redirect URI to register at the provider);
no routes at all while company sign-in is off. Both answer without a sign-in: they are
how one signs in (the state kept in the session guards the callback)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.urls import URLPattern, path

from fleet.oidc.backend import CALLBACK_URL_NAME
from fleet.oidc.views import FinishCompanySignIn, StartCompanySignIn

START_URL_NAME = "oidc-sign-in"

urlpatterns: list[URLPattern] = (
    [
        path(
            "authenticate/", login_not_required(StartCompanySignIn.as_view()), name=START_URL_NAME
        ),
        path(
            "callback/", login_not_required(FinishCompanySignIn.as_view()), name=CALLBACK_URL_NAME
        ),
    ]
    if settings.OIDC_SIGN_IN
    else []
)
