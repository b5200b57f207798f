"""The browsers' live sockets (dashboard/consumers.py says what each sends)."""

from __future__ import annotations

from django.urls import path

from dashboard.consumers import (
    CoolingConsumer,
    FleetConsumer,
    RackConsumer,
    RackPageConsumer,
    RackSignalConsumer,
    SiteConsumer,
)

websocket_urlpatterns = [
    path("ws/live/fleet", FleetConsumer.as_asgi()),
    path("ws/live/site/<int:site_id>", SiteConsumer.as_asgi()),
    path("ws/live/rack/<int:rack_id>", RackConsumer.as_asgi()),
    path("ws/live/rack/<int:rack_id>/changed", RackSignalConsumer.as_asgi()),
    path("ws/live/rack/<int:rack_id>/page", RackPageConsumer.as_asgi()),
    path("ws/live/cooling", CoolingConsumer.as_asgi()),
]
