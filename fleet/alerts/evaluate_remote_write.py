"""The remote-write lag signal (`remote_write:lag`, fleet/alerts/signals_remote_write.py): the
shipper's worst lag (fleet/remote_write/lag.py), the same value for every site, as the one
shipper serves them all. No value while remote write is off or has never run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleet.models import Site
from fleet.remote_write.lag import worst_lag_s

if TYPE_CHECKING:
    from fleet.alerts.evaluate_state import Snapshot, Values

__all__ = ("remote_write_lag",)


def remote_write_lag(snap: Snapshot) -> Values:
    lag = worst_lag_s(snap.now)
    if lag is None:
        return {}
    return {(int(pk),): lag for pk in Site.objects.values_list("pk", flat=True)}
