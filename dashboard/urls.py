from __future__ import annotations

from django.urls import URLPattern, path

from dashboard import views

urlpatterns: list[URLPattern] = [
    path("", views.fleet_overview, name="fleet-overview"),
    path("racks/<int:rack_id>/", views.rack, name="rack"),
    path("cooling/", views.cooling, name="cooling"),
    path("alerts/", views.alerts, name="alerts"),
    path("alerts/acknowledge", views.acknowledge_alerts, name="alerts-acknowledge"),
]
