"""The remote-write signal of the catalogue (fleet/alerts/signals.py): how far the shipper of
raw samples to the site's TSDB is behind (fleet/remote_write/lag.py), evaluated by
fleet/alerts/evaluate_remote_write.py."""

from __future__ import annotations

from fleet.alerts.signal_model import Signal

REMOTE_WRITE: tuple[Signal, ...] = (
    Signal(
        "remote_write_lag_s",
        "site",
        "s",
        "seconds since the newest time before which every settled raw sample has reached the"
        " remote-write receiver, the worst kind's (the same for every site: one shipper"
        " serves them all); no value while remote write is off or has never run",
        "remote_write:lag",
        absent_clears=True,
    ),
)
