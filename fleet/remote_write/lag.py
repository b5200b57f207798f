"""How far behind remote write is, for /metrics, the system page and the lag rule.

Lag of a kind: now minus its cursor's `complete_until` (every settled raw row before it has
been shipped). Even a shipper that keeps up trails ingest by the 1-minute rollup's settling
(its 10 s grace, the minute to fill, its 30 s beat): about one to two minutes. The rule's
threshold (`LAG_ALERT_S`, the rule in fleet/alerts/rulepack_remote_write.py) sits well
above that.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS

from fleet.models import RemoteWriteCursor

__all__ = ("LAG_ALERT_S", "KindLag", "kind_lags", "worst_lag_s")

# The lag at which the rule `remote-write-lag` fires: ten minutes, five to ten times what a
# shipper that keeps up shows, and well inside raw retention (3 h by default), so the
# shipper can still catch up from the raw tier once the receiver is back.
LAG_ALERT_S = 600.0


@dataclass(frozen=True, slots=True)
class KindLag:
    kind: str
    lag_s: float
    shipped_samples: int
    dropped_samples: int
    last_success_at: float | None
    failures: int
    last_error: str


def kind_lags(now: float, using: str = DEFAULT_DB_ALIAS) -> list[KindLag]:
    """Each shipped kind's lag and counters; empty when remote write is off, or before the
    first pass ("never shipped")."""
    if not settings.REMOTE_WRITE.enabled:
        return []
    return [
        KindLag(
            c.kind,
            max(0.0, now - c.complete_until),
            c.shipped_samples,
            c.dropped_samples,
            c.last_success_at,
            c.failures,
            c.last_error,
        )
        for c in RemoteWriteCursor.objects.using(using).all()
    ]


def worst_lag_s(now: float, using: str = DEFAULT_DB_ALIAS) -> float | None:
    """The largest lag of any kind; None when remote write is off or never ran."""
    lags = kind_lags(now, using)
    return max((k.lag_s for k in lags), default=None)
