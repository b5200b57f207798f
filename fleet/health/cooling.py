"""Liquid loops (CDUs): supply against the class limit, flow, pumps, leaks."""

from __future__ import annotations

from dataclasses import dataclass

from fleet.health.levels import Level, Reading, _rising, leak_level, newest_ts, stale, worst
from fleet.health.thresholds import (
    FLOW_CRIT_FRACTION,
    FLOW_STOPPED_LPM,
    FLOW_WARN_FRACTION,
    PUMPS_FAILED_WARN,
    PUMPS_RUNNING_MIN,
    RESERVOIR_LOW_WARN,
    STALE_AFTER_S,
    SUPPLY_WARN_MARGIN_C,
)


def supply_level(supply_c: float | None, limit_c: float | None) -> Level:
    """Loop supply against its W-class limit: above it crit, within 2 °C of it warn."""
    if limit_c is None:
        return Level.UNKNOWN
    return _rising(supply_c, limit_c - SUPPLY_WARN_MARGIN_C, limit_c, strict=True)


def flow_level(flow_lpm: float | None, rated_flow_lpm: float | None) -> Level:
    """Flow: stopped (≤ 1 L/min) crit; against a rating, < 2 % crit and < 10 % warn."""
    if flow_lpm is None or flow_lpm <= FLOW_STOPPED_LPM:
        return Level.UNKNOWN if flow_lpm is None else Level.CRIT
    if rated_flow_lpm is None or rated_flow_lpm <= 0:
        return Level.OK
    frac = flow_lpm / rated_flow_lpm
    return _rising(-frac, -FLOW_WARN_FRACTION, -FLOW_CRIT_FRACTION, strict=True)


@dataclass(frozen=True, slots=True)
class LoopSummary:
    supply_c: float | None
    return_c: float | None
    delta_c: float | None  # return − supply (reported, else computed)
    flow_lpm: float | None
    flow_frac: float | None  # of rated flow
    pumps_failed: int | None
    leak: int | None
    ts: float | None
    stale: bool
    level: Level


def loop_summary(
    loop: Reading,
    now: float,
    stale_after_s: float = STALE_AFTER_S,
    supply_limit_c: float | None = None,
    rated_flow_lpm: float | None = None,
) -> LoopSummary:
    """A secondary liquid loop (CDU): supply vs its W-class limit, flow collapse, failed
    pumps (warn; none running: crit), leak, reservoir low (warn). Unknown when stale or
    when none of those can be judged."""

    def get(name: str) -> float | None:
        v = loop.fresh(name, now, stale_after_s)
        return None if v is None else float(v)

    supply, ret, flow = get("supply_c"), get("return_c"), get("flow_lpm")
    delta = get("delta_c")
    if delta is None and supply is not None and ret is not None:
        delta = ret - supply
    failed, running = get("pumps_failed"), get("pumps_running")
    leak, reservoir = get("leak"), get("reservoir_low")
    levels: list[Level] = []
    if supply is not None and supply_limit_c is not None:
        levels.append(supply_level(supply, supply_limit_c))
    if flow is not None:
        levels.append(flow_level(flow, rated_flow_lpm))
    if failed is not None:
        levels.append(Level.WARN if failed >= PUMPS_FAILED_WARN else Level.OK)
    if running is not None:
        levels.append(Level.CRIT if running < PUMPS_RUNNING_MIN else Level.OK)
    if leak is not None:
        levels.append(leak_level(leak))
    if reservoir is not None:
        levels.append(Level.WARN if reservoir >= RESERVOIR_LOW_WARN else Level.OK)
    is_stale = stale(loop, now, stale_after_s)
    return LoopSummary(
        supply_c=supply,
        return_c=ret,
        delta_c=delta,
        flow_lpm=flow,
        flow_frac=flow / rated_flow_lpm if flow is not None and rated_flow_lpm else None,
        pumps_failed=None if failed is None else int(failed),
        leak=None if leak is None else int(leak),
        ts=newest_ts(loop),
        stale=is_stale,
        level=Level.UNKNOWN if is_stale else worst(*levels),
    )
