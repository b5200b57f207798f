"""The alert pipeline watches itself: when evaluation stops (no tick for three intervals)
or falls behind (one pass takes longer than the interval), that is an alert, delivered
like any other — and so is its end.

Run by `alerts.watchdog` on the default queue, not the "rules" queue the evaluation uses,
so a dead or stuck rules worker is noticed by another. The change is claimed with a
conditional UPDATE of the `AlertEvaluation` row (the last announced problem), so two
watchdogs announce it once. What no watchdog can report: a dead beat (it sends both
tasks) or no worker at all — `docs/operations.md` says how to watch for those.
"""

from __future__ import annotations

import datetime as dt
import time

from django.conf import settings
from django.db import transaction

from fleet.alerts.models import AlertEvaluation
from fleet.notifications.notice import Notice
from fleet.notifications.slack import format_duration
from fleet.notifications.tasks import send_notice

__all__ = ("STALL_INTERVALS", "check", "problem_of")

STALL_INTERVALS = 3  # ticks missed before evaluation counts as stopped
MIN_STALL_S = 30.0


def problem_of(row: AlertEvaluation, now: float, interval_s: float) -> str:
    """What is wrong with evaluation now ("" when nothing is). Stopped counts from the
    later of the last pass and the start of this watch, so a fleet restarted after a day
    off is not 'stopped' before its first tick."""
    stall_after = max(MIN_STALL_S, STALL_INTERVALS * interval_s)
    watching_since = row.watchdog_since.timestamp() if row.watchdog_since else now
    if now - max(row.tick, watching_since) > stall_after:
        if row.tick < watching_since:
            return f"Alert evaluation has stopped: no pass for {_ago(now, watching_since)}"
        return f"Alert evaluation has stopped: last pass {_ago(now, row.tick)} ago"
    if row.last_duration_s > interval_s:
        return (
            f"Alert evaluation is falling behind: one pass takes {row.last_duration_s:.1f} s,"
            f" longer than the {interval_s:g} s interval"
        )
    return ""


def _ago(now: float, then: float) -> str:
    return format_duration(dt.timedelta(seconds=max(0.0, now - then)))


def check(now: float | None = None) -> str:
    """Compare the evaluation's state with what was last announced; announce a change
    (a problem starting, changing kind, or ending) once. Returns the problem ("" if none)."""
    now = time.time() if now is None else now
    at = dt.datetime.fromtimestamp(now, tz=dt.UTC)
    with transaction.atomic():
        AlertEvaluation.objects.bulk_create([AlertEvaluation(pk=1)], ignore_conflicts=True)
        row = AlertEvaluation.objects.select_for_update().get(pk=1)
        seen = row.watchdog_seen.timestamp() if row.watchdog_seen else None
        # The watchdog itself missed three runs: everything was down, a new watch begins.
        if seen is None or now - seen > 3 * float(settings.ALERT_WATCHDOG_S):
            row.watchdog_since = at  # the watchdog itself was not running: a new watch
        row.watchdog_seen = at
        AlertEvaluation.objects.filter(pk=1).update(
            watchdog_since=row.watchdog_since, watchdog_seen=at
        )
        problem = problem_of(row, now, float(settings.ALERT_EVAL_S))
        before = row.watchdog_problem
        if _kind(problem) == _kind(before):
            return problem
        claimed = AlertEvaluation.objects.filter(pk=1, watchdog_problem=before).update(
            watchdog_problem=problem[:300]
        )
        if claimed:
            send_notice(_notice(problem, before, at))
    return problem


def _kind(problem: str) -> str:
    return problem.split(":")[0] if problem else ""


def _notice(problem: str, before: str, at: dt.datetime) -> Notice:
    if problem:
        return Notice(
            kind="firing",
            severity="critical",
            title=problem,
            since=at,
            cause="Until it runs again, no alert rule is evaluated: nothing new will be"
            " announced. Check the Celery worker serving the 'rules' queue and the beat"
            " (docs/operations.md, 'Alerting').",
        )
    return Notice(kind="resolved", severity="critical", title=f"{before} — running again")
