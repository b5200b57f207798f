"""GET /metrics: Fleetwatch's view for Prometheus (fleet/prometheus/export.py)."""

from __future__ import annotations

import hmac
import time

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET
from prometheus_client.exposition import CONTENT_TYPE_LATEST  # text format 0.0.4

from fleet.ingest.auth import bearer_from_meta
from fleet.prometheus.export import render


def _refused(status: int, reason: str) -> JsonResponse:
    response = JsonResponse(
        {"error": {"code": status, "field": "authorization", "reason": reason}}, status=status
    )
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="fleetwatch-metrics"'
    return response


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    expected = settings.METRICS_TOKEN
    if expected:
        token = bearer_from_meta(request.META) or ""
        if not token:
            return _refused(401, "send Authorization: Bearer <FLEETWATCH_METRICS_TOKEN>")
        if not hmac.compare_digest(token.encode(), expected.encode()):
            return _refused(403, "wrong metrics token")
    return HttpResponse(render(time.time()), content_type=CONTENT_TYPE_LATEST)
