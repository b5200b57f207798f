"""`/metrics`: Fleetwatch's view of the fleet in the Prometheus text format (export.py,
agent_series.py), served by views.py — rendered from the database on each scrape."""
