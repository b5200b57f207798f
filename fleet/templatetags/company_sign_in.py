"""`{% company_sign_in %}`: the sign-in page's "Sign in with <provider>" button, shown only
while company sign-in is configured (fleet/oidc/)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import template
from django.conf import settings
from django.urls import reverse

from fleet.oidc import START_URL_NAME

register = template.Library()


@register.inclusion_tag("registration/company_sign_in.html", takes_context=True)
def company_sign_in(context: template.Context) -> dict[str, Any]:
    oidc = settings.OIDC_SIGN_IN
    if oidc is None:
        return {"href": None}
    next_url = context.get("next")
    query = f"?{urlencode({'next': next_url})}" if next_url else ""
    return {"href": reverse(START_URL_NAME) + query, "provider_name": oidc.provider_name}
