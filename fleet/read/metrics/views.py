"""GET /metrics: Fleetwatch's view for Prometheus (fleet/read/metrics/export.py).

Closed by default: a scrape is served when it sends the bearer token
(FLEETWATCH_METRICS_TOKEN) or comes from an address in FLEETWATCH_METRICS_ALLOW;
FLEETWATCH_METRICS_PUBLIC=1 serves anyone (the demo). The address is the client's as
uvicorn gives it: behind the proxy, the one the proxy forwards when uvicorn trusts it
(`--forwarded-allow-ips`, docs/operations.md).
"""

from __future__ import annotations

import hmac
import ipaddress
import time

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET
from prometheus_client.exposition import CONTENT_TYPE_LATEST  # text format 0.0.4

from fleet.ingest.auth import bearer_from_meta
from fleet.read.metrics.export import render

CLOSED = (
    "/metrics is closed: set FLEETWATCH_METRICS_TOKEN (and send it as a bearer token), "
    "FLEETWATCH_METRICS_ALLOW (Prometheus's address), or FLEETWATCH_METRICS_PUBLIC=1"
)


def _refused(status: int, reason: str) -> JsonResponse:
    response = JsonResponse(
        {"error": {"code": status, "field": "authorization", "reason": reason}}, status=status
    )
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="fleetwatch-metrics"'
    return response


def _address_allowed(request: HttpRequest) -> bool:
    try:
        address = ipaddress.ip_address(str(request.META.get("REMOTE_ADDR", "")))
    except ValueError:
        return False
    return any(address in network for network in settings.METRICS_ALLOW)


def _refusal(request: HttpRequest) -> JsonResponse | None:
    """None when this scrape may be served, else the answer that says why not."""
    if settings.METRICS_PUBLIC or _address_allowed(request):
        return None
    expected = settings.METRICS_TOKEN
    if not expected:
        return _refused(403, CLOSED)
    token = bearer_from_meta(request.META) or ""
    if not token:
        return _refused(401, "send Authorization: Bearer <FLEETWATCH_METRICS_TOKEN>")
    if not hmac.compare_digest(token.encode(), expected.encode()):
        return _refused(403, "wrong metrics token")
    return None


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    refusal = _refusal(request)
    if refusal is not None:
        return refusal
    return HttpResponse(render(time.time()), content_type=CONTENT_TYPE_LATEST)
