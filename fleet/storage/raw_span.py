"""How raw rows are sealed and packed: the one owner of `FLEETWATCH_RAW_PACK_MINUTES`.

The packer (fleet.storage.packed) turns each sealed span of raw rows into one packed row per
entity; this says how long a span is. On PostgreSQL a span is one raw partition, so the raw
tables are partitioned by the same width (fleet.storage.partitions). Read from the
environment, not Django settings: the ingest child makes raw partitions without Django.

- unset: 60 (an hour, the raw partitions' width since migration 0016), packing on;
- a divisor of 60 (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30, 60): spans and raw partitions of
  that many minutes (bench/peer.py seals every 5, as it has Prometheus cut its blocks);
- 0: no packing, hourly raw partitions.
"""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

ENV = "FLEETWATCH_RAW_PACK_MINUTES"
DEFAULT_MINUTES = 60
HOUR_S = 3600


def pack_minutes() -> int:
    """The setting's value, checked: 0 (off) or a divisor of 60."""
    raw = os.environ.get(ENV, "")
    if raw == "":
        return DEFAULT_MINUTES
    try:
        minutes = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{ENV}={raw!r} is not an integer") from None
    if minutes < 0 or (minutes and 60 % minutes):
        raise ImproperlyConfigured(f"{ENV}={minutes}: 0 (off) or a divisor of 60")
    return minutes


def packing_enabled() -> bool:
    return pack_minutes() > 0


def span_s() -> int:
    """Seconds per packed span and per raw partition (an hour when packing is off)."""
    minutes = pack_minutes()
    return minutes * 60 if minutes else HOUR_S
