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
from fleet.words import age_words

__all__ = ("LAG_ALERT_S", "NEVER_SHIPPED", "KindLag", "kind_lags", "lag_words", "worst_lag_s")

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


NEVER_SHIPPED = "on, never shipped yet"


def lag_words(now: float, using: str = DEFAULT_DB_ALIAS) -> tuple[str, str] | None:
    """What the fleet overview says of remote write, with a title (the last refusal or
    failure, or ""); None while it is off. The one owner of these words."""
    if not settings.REMOTE_WRITE.enabled:
        return None
    lags = kind_lags(now, using)
    if not lags:
        return NEVER_SHIPPED, ""
    worst = max(lags, key=lambda k: k.lag_s)
    shipped = sum(k.shipped_samples for k in lags)
    dropped = sum(k.dropped_samples for k in lags)
    text = f"{age_words(worst.lag_s)} behind; {shipped:,} samples shipped, {dropped:,} refused"
    failing = [k for k in lags if k.failures]
    if failing:
        text += f"; receiver failing ({max(k.failures for k in failing)} passes in a row)"
    errors = [k.last_error for k in lags if k.last_error]
    return text, errors[0] if errors else ""
