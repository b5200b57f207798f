"""The Prometheus pull as a Celery task, on the "rules" queue beside alert evaluation
(fleetwatch/celery.py), so a long rollup or retention pass never holds it up."""

from __future__ import annotations

from typing import Any

from fleet.prometheus.pull import pull_all
from fleet.tasks import instrumented_task


@instrumented_task("prometheus.pull", max_retries=1, retry_backoff_max=5)
def pull_prometheus(now: float | None = None) -> dict[str, dict[str, Any]]:
    """Every enabled source once; a source that is down is marked down, not raised."""
    return pull_all(now)
