"""The Prometheus pull: a second ingest source beside the agents. dcgm-exporter series read
from a Prometheus (pull.py, pull_query.py, pull_match.py, mapping.py) and written through the
same write path as an agent's batches (pull_db.py); its Celery task (tasks.py) and the admin
for its sources (admin.py)."""
