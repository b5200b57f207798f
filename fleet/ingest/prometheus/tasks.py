"""The Prometheus pull as a Celery task, on a queue of its own, "pull" (fleetwatch/celery.py):
a Prometheus that stalls holds up the next pull, never an alert evaluation, and a long
rollup or retention pass never holds up the pull. Time limits: fleet/tasks.py."""

from __future__ import annotations

from typing import Any

from fleet.ingest.prometheus.pull import pull_all
from fleet.tasks import instrumented_task


@instrumented_task("prometheus.pull", max_retries=1, retry_backoff_max=5)
def pull_prometheus(now: float | None = None) -> dict[str, dict[str, Any]]:
    """Every enabled source once; a source that is down is marked down, not raised."""
    return pull_all(now)
