from __future__ import annotations

from django.urls import path

from dashboard.consumers import FleetConsumer

websocket_urlpatterns = [path("ws/live/fleet", FleetConsumer.as_asgi())]
