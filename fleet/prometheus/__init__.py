"""Prometheus interop: Fleetwatch's own view exported at /metrics (export.py, views.py).
Pulling dcgm-exporter series from a Prometheus is not built yet (issue 10)."""
