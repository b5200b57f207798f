"""A clear error instead of an endless redirect when the TLS proxy's header is not trusted.

https is the default (settings: SECURE_SSL_REDIRECT). Behind the documented nginx every
request reaches uvicorn over plain http with `X-Forwarded-Proto: https`; unless
FLEETWATCH_PROXY_SSL_HEADER names that header, Django takes each one for plain http and
redirects it to the https address it came from, forever. This answers such a request with
what to set instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

log = logging.getLogger(__name__)

FIX = (
    "Fleetwatch is behind a TLS proxy (the request says X-Forwarded-Proto: https) but "
    "FLEETWATCH_PROXY_SSL_HEADER is unset, so every request would be redirected to https "
    'forever. Set FLEETWATCH_PROXY_SSL_HEADER="X-Forwarded-Proto: https" in the server\'s '
    'environment (docs/operations.md, "Running the server").'
)


class ProxyHeaderMissingMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.misconfigured = settings.SECURE_SSL_REDIRECT and not settings.SECURE_PROXY_SSL_HEADER

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if self.misconfigured and request.headers.get("X-Forwarded-Proto") == "https":
            log.error(FIX)
            return HttpResponse(FIX, status=500, content_type="text/plain; charset=utf-8")
        return self.get_response(request)
