"""Figures the alert rules need beyond the summaries (fleet/alerts/signals.py names
each one as a signal's source). A source's silence is judged by its own
cadence in fleet/health/cadence.py."""

from __future__ import annotations

from agents.protocol import reasons as nvml
from fleet.health.levels import Reading, newest_ts, stale
from fleet.health.thresholds import STALE_AFTER_S


def power_fraction(kw: float | None, budget_kw: float | None) -> float | None:
    """Rack power as a fraction of its budget (1.0 = at budget); None without both."""
    if kw is None or budget_kw is None or budget_kw <= 0:
        return None
    return float(kw) / float(budget_kw)


def feed_load_fraction(
    reading: Reading, available_kw: float | None, now: float, stale_after_s: float = STALE_AFTER_S
) -> float | None:
    """A feed's fresh power against what it may carry continuously (`PowerFeed.available_kw`:
    V × A × max utilisation, × √3 three-phase); None when either is unknown."""
    power = reading.fresh("power_w", now, stale_after_s)
    if power is None or available_kw is None or available_kw <= 0:
        return None
    return float(power) / 1000.0 / float(available_kw)


def supply_over_limit_c(supply_c: float | None, limit_c: float | None) -> float | None:
    """°C a loop's supply stands above its W-class limit (negative: below it)."""
    if supply_c is None or limit_c is None:
        return None
    return float(supply_c) - float(limit_c)


def power_capped_clock_fraction(
    reading: Reading, clock_max_mhz: float | None, now: float, stale_after_s: float = STALE_AFTER_S
) -> float | None:
    """SM clock as a fraction of the GPU's max while the SW power-cap bit is set; None when
    the bit is clear (nothing to judge) or the clock or its max is unknown. A capped GPU
    near its max clock loses little; one held far under it is losing real throughput."""
    mask = reading.fresh("clock_event_reasons", now, stale_after_s)
    clock = reading.fresh("clock_sm_mhz", now, stale_after_s)
    if mask is None or not int(mask) & nvml.SW_POWER_CAP:
        return None
    if clock is None or clock_max_mhz is None or clock_max_mhz <= 0:
        return None
    return float(clock) / float(clock_max_mhz)


def field_lag(
    reading: Reading, now: float, stale_after_s: float = STALE_AFTER_S
) -> tuple[str, float] | None:
    """The field that trails the entity's newest sample the most, and by how many seconds.

    None when the entity itself is stale: then its agent is silent, which is another
    signal; a field lagging behind a fresh reading is one that stopped arriving.
    """
    newest = newest_ts(reading)
    if newest is None or stale(reading, now, stale_after_s):
        return None
    lags = [(newest - t, name) for name, t in reading.ts.items() if name in reading.values]
    lag, name = max(lags, default=(0.0, ""), key=lambda item: (item[0], item[1]))
    return (name, lag) if name else None


def gpu_missing(
    gpu: Reading, node: Reading, now: float, stale_after_s: float = STALE_AFTER_S
) -> bool | None:
    """True when the node reports but this GPU (in the inventory) has nothing fresh: it fell
    off the bus or its driver lost it. None when the node itself is silent (unknown)."""
    if stale(node, now, stale_after_s):
        return None
    return stale(gpu, now, stale_after_s)
