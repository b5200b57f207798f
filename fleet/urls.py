from __future__ import annotations

from django.urls import URLPattern, path

from fleet.ingest import views
from fleet.read.metrics import views as metrics_views
from fleetwatch.public import public

# Agents and Prometheus present tokens, not a session: each is on the public list.
urlpatterns: list[URLPattern] = [
    path("api/v1/enroll", public(views.enroll), name="enroll"),
    path("api/v1/ingest", public(views.ingest), name="ingest"),
    path("api/v1/inventory", public(views.inventory), name="inventory"),
    path("metrics", public(metrics_views.metrics), name="metrics"),
]
