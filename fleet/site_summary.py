"""A site's own figures for its live strip: facility power, IT power, PUE with its
category (and, as they are built, GPUs throttling, alerts firing, agents stale)."""

from __future__ import annotations

from typing import Any

from fleet import health

Payload = dict[str, Any]


def site_payload(site_id: int, now: float) -> Payload:
    from fleet.state import latest_readings  # state imports this module

    reading = latest_readings("facility", [site_id]).get((site_id,), health.EMPTY)
    value, category = health.facility_pue(reading, now)
    return {
        "pue": value,
        "pue_category": category,
        "total_power_w": reading.fresh("total_power_w", now, health.STALE_AFTER_S),
        "it_power_w": reading.fresh("it_power_w", now, health.STALE_AFTER_S),
        "ts": health.newest_ts(reading),
    }
