"""GET /healthz: whether this server process can serve, for load balancers and probes.

Public (fleetwatch/public.py) and exempt from the https redirect (settings,
SECURE_REDIRECT_EXEMPT), so a probe can ask uvicorn directly over plain http. It says
nothing but "ok" or what is down.
"""

from __future__ import annotations

from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from fleetwatch.public import public


@public
@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        return JsonResponse({"status": "database unavailable"}, status=503)
    return JsonResponse({"status": "ok"})
