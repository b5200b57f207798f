from __future__ import annotations

from django.urls import URLPattern, path

from dashboard import (
    capacity,
    capacity_headroom,
    efficiency,
    gpu,
    gpu_health,
    history,
    muting,
    node,
    power,
    reports,
    views,
)

urlpatterns: list[URLPattern] = [
    path("", views.fleet_overview, name="fleet-overview"),
    path("racks/<int:rack_id>/", views.rack, name="rack"),
    path("nodes/<int:node_id>/", node.node_view, name="node"),
    path("gpus/<int:gpu_id>/", gpu.gpu_view, name="gpu"),
    path("cooling/", views.cooling, name="cooling"),
    path("power/", power.power_view, name="power"),
    path("capacity/", capacity.capacity_view, name="capacity"),
    path("capacity/headroom/", capacity_headroom.headroom_view, name="capacity-headroom"),
    path("efficiency/", efficiency.efficiency_view, name="efficiency"),
    path("health/", gpu_health.gpu_health_view, name="gpu-health"),
    path("reports/weekly/", reports.weekly_report_view, name="weekly-report"),
    path("alerts/", views.alerts, name="alerts"),
    path("alerts/acknowledge", views.acknowledge_alerts, name="alerts-acknowledge"),
    path("alerts/silences/new", muting.silence_form, name="silence-new"),
    path("alerts/maintenance/new", muting.maintenance_form, name="maintenance-new"),
    path("api/capacity/answer", capacity.capacity_answer_api, name="capacity-answer"),
    path("api/v1/history", history.history_api, name="history"),
    path("vendor/plotly.min.js", gpu.plotly_js, name="plotly-js"),
]
