"""Celery tasks of the alert engine: `alerts.evaluate`, sent by beat every
FLEETWATCH_ALERT_EVAL_S (10 s) on the "rules" queue (nothing else is on it), and
`alerts.watchdog`, every 30 s on the default queue. Time limits: fleet/tasks.py."""

from __future__ import annotations

from fleet.alerts import watchdog as pipeline
from fleet.alerts.engine import evaluate as evaluate_rules
from fleet.tasks import instrumented_task


# Retries stay within the 10 s tick: a later retry is worth nothing (the next tick
# evaluates the same latest state, and a retried old tick is skipped by its claim).
@instrumented_task("alerts.evaluate", max_retries=2, retry_backoff_max=4)
def evaluate(now: float | None = None) -> dict[str, int]:
    """Evaluate every enabled rule once; counts of rules, new and changed instances."""
    return evaluate_rules(now)


@instrumented_task("alerts.watchdog", max_retries=1, retry_backoff_max=10)
def watchdog(now: float | None = None) -> str:
    """Announce when evaluation stops or falls behind, and when it recovers."""
    return pipeline.check(now) or "ok"
