"""ASGI entry point: HTTP (Django), agent ingest WebSocket, live-page WebSocket."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fleetwatch.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402
from django.urls import path  # noqa: E402

from agents.protocol import WS_PATH  # noqa: E402
from dashboard.routing import websocket_urlpatterns as dashboard_ws  # noqa: E402
from fleet.gc_policy import settle_gc  # noqa: E402
from fleet.ingest.consumer import IngestConsumer  # noqa: E402
from fleet.ingest.tally import tally  # noqa: E402

tally.start_flushing()  # refusals counted per source reach the admin's "Refused input"

# Agents authenticate with bearer tokens, browsers with their session; the two
# routes are kept apart so neither middleware sees the other's traffic.
ingest_routes = [path(WS_PATH.lstrip("/"), IngestConsumer.as_asgi())]
if settings.BENCH_ROUTES:
    from fleet.ingest.noop import NoopIngestConsumer, StockNoopConsumer

    ingest_routes += [
        path("ws/ingest/bench-noop", NoopIngestConsumer.as_asgi()),
        path("ws/ingest/bench-stock", StockNoopConsumer.as_asgi()),
    ]
ingest_ws = URLRouter(ingest_routes)
browser_ws = AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(dashboard_ws)))


async def websocket_router(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["path"].startswith("/ws/ingest/"):
        return await ingest_ws(scope, receive, send)
    return await browser_ws(scope, receive, send)


application = ProtocolTypeRouter({"http": django_asgi_app, "websocket": websocket_router})
settle_gc()  # last: everything built above lives as long as the process
