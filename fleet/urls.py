from __future__ import annotations

from django.urls import URLPattern, path

from fleet.ingest import views
from fleet.prometheus import views as prometheus

urlpatterns: list[URLPattern] = [
    path("api/v1/enroll", views.enroll, name="enroll"),
    path("api/v1/ingest", views.ingest, name="ingest"),
    path("api/v1/inventory", views.inventory, name="inventory"),
    path("metrics", prometheus.metrics, name="metrics"),
]
