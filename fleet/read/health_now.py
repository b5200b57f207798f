"""Each GPU's health state (fleet/health/record.py) as the task `fleet.health` last stored
it, read by the health-state alert rules (fleet/alerts/evaluate_health.py) every 10 s.

A site's records take about a second at 10,000 GPUs (bench/foresight.py, health pass):
more than a rule pass may wait, so the task computes them once a minute and stores, per
site, the GPUs not healthy with their state and first evidence (fleet/read/computed.py:
one cache lookup a read; nothing before the first run, when stale, or when the cache is
down). The pages read the records themselves (fleet/read/health_record.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import DEFAULT_DB_ALIAS

from fleet.health import record as hr
from fleet.models import Site
from fleet.read import computed
from fleet.read.health_record import GpuKey, site_records

__all__ = ("HealthState", "health_now", "refresh_health")

_KIND = "health"


@dataclass(frozen=True, slots=True)
class HealthState:
    """A GPU not healthy: its state and the first (worst) evidence, in the record's words."""

    state: str
    evidence: str


def refresh_health(now: float) -> int:
    """Judge every site's GPUs as of `now`'s minute and store those not healthy for
    `health_now`; the number of sites done. The body of the task `fleet.health`."""
    minute = computed.minute_of(now)
    done = 0
    for site_id in Site.objects.order_by("pk").values_list("pk", flat=True):
        states = {
            r.key: HealthState(r.state, _evidence(r.verdict))
            for r in site_records(site_id, minute)
            if r.state != hr.HEALTHY
        }
        computed.store(computed.key(_KIND, site_id, DEFAULT_DB_ALIAS), minute, states)
        done += 1
    return done


def health_now(site_id: int, now: float) -> dict[GpuKey, HealthState]:
    """The site's GPUs that are not healthy, as `refresh_health` last stored them; {} where
    nothing is stored, it is stale or the cache cannot be reached. Never judges."""
    got: dict[GpuKey, HealthState] | None = computed.fetch(
        computed.key(_KIND, site_id, DEFAULT_DB_ALIAS), now
    )
    return {} if got is None else got


def _evidence(verdict: hr.Verdict) -> str:
    if not verdict.evidence:
        return ""
    first = verdict.evidence[0]
    return f"{first.criterion} ({first.observed})"
