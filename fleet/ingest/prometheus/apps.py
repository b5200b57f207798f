from __future__ import annotations

from django.apps import AppConfig


class PrometheusPullConfig(AppConfig):
    """An app so that it registers itself: Django's admin autodiscovery finds its admin.py and
    Celery's task autodiscovery its tasks.py. Its model (PrometheusSource) stays in the fleet
    app's migrations (fleet/models/prometheus.py)."""

    name = "fleet.ingest.prometheus"
    label = "prometheus_pull"
    verbose_name = "Prometheus pull"
