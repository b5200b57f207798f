"""/metrics series of remote write (fleet/remote_write/): how far behind the shipper is per
sample kind, and what it shipped and what the receiver refused for good. Absent while remote
write is off or before its first pass. Labels: `kind` only (six sample kinds)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleet.remote_write.lag import kind_lags

if TYPE_CHECKING:
    from fleet.read.metrics.export import Families


def remote_write_series(f: Families, now: float) -> None:
    lags = kind_lags(now)
    if not lags:
        return
    lag = f.gauge(
        "fleetwatch_remote_write_lag_seconds",
        "seconds since the newest time before which every settled raw sample has reached the"
        " remote-write receiver",
        ["kind"],
    )
    shipped = f.counter(
        "fleetwatch_remote_write_samples", "samples the receiver accepted (2xx)", ["kind"]
    )
    dropped = f.counter(
        "fleetwatch_remote_write_dropped_samples",
        "samples the receiver refused for good (4xx other than 429): not sent again",
        ["kind"],
    )
    for k in lags:
        lag.add_metric([k.kind], k.lag_s)
        shipped.add_metric([k.kind], float(k.shipped_samples))
        dropped.add_metric([k.kind], float(k.dropped_samples))
