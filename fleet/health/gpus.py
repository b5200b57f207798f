"""A GPU's headroom to its own limits, its throttling, and node summaries."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

from agents.protocol import reasons as nvml
from fleet.health.levels import (
    EMPTY,
    GpuLimits,
    Level,
    Reading,
    headroom_level,
    inlet_level,
    newest_ts,
    stale,
    worst,
)
from fleet.health.lost import LOST_LEVEL
from fleet.health.thresholds import (
    BENIGN_REASONS,
    CRIT_REASONS,
    POWER_REASONS,
    STALE_AFTER_S,
    THERMAL_REASONS,
    WARN_REASONS,
)


@dataclass(frozen=True, slots=True)
class Headroom:
    """°C below each of the GPU's own limits (negative: above it); None when unknown."""

    slowdown_c: float | None
    shutdown_c: float | None
    gpu_max_c: float | None
    mem_max_c: float | None  # HBM
    level: Level


def _to_limit(
    temp: float | None, limit: float | None, margin: float | None, tlimit: float | None
) -> float | None:
    if temp is not None and limit is not None:
        return float(limit - temp)
    if margin is not None and tlimit is not None:
        return float(margin - tlimit)
    return None


def gpu_headroom(
    reading: Reading, limits: GpuLimits | None, now: float, stale_after_s: float = STALE_AFTER_S
) -> Headroom:
    """Headroom to slowdown, shutdown, max-operating and HBM max, absolute form first
    (`limit − temp`), else the T.Limit form (`temp_margin_c − tlimit_*`, docs/protocol.md).

    Its level judges slowdown headroom (unknown when not computable) and HBM headroom
    where the GPU reports one (many do not: that alone is not unknown).
    """
    lim = limits or GpuLimits()
    temp = reading.fresh("temp_gpu_c", now, stale_after_s)
    mem = reading.fresh("temp_mem_c", now, stale_after_s)
    margin = reading.fresh("temp_margin_c", now, stale_after_s)
    slowdown = _to_limit(temp, lim.slowdown_c, margin, lim.tlimit_slowdown_c)
    mem_max = _to_limit(mem, lim.mem_max_c, margin, lim.tlimit_mem_max_c)
    level = headroom_level(slowdown)
    if mem_max is not None:
        level = worst(level, headroom_level(mem_max))
    return Headroom(
        slowdown,
        _to_limit(temp, lim.shutdown_c, margin, lim.tlimit_shutdown_c),
        _to_limit(temp, lim.gpu_max_c, margin, lim.tlimit_gpu_max_c),
        mem_max,
        level,
    )


@dataclass(frozen=True, slots=True)
class Throttle:
    """A decoded clock-event mask. `mask` None: the GPU does not report one."""

    mask: int | None
    reasons: tuple[str, ...]  # every bit set, in bit order (unknown bits as bit_0x…)
    thermal: tuple[str, ...]  # hw_thermal, sw_thermal, hw_slowdown
    power: tuple[str, ...]  # power_cap, hw_power_brake
    benign: tuple[str, ...]  # gpu_idle, sync_boost, clocks_setting, display_clocks
    throttling: bool  # thermal or power: what the fleet counts as throttling
    level: Level


@functools.lru_cache(maxsize=4096)  # masks repeat across a fleet; Throttle is immutable
def throttle_state(mask: int | None) -> Throttle:
    """Decode a clock-event mask (agents/protocol/reasons.py) and classify its bits."""
    if mask is None:
        return Throttle(None, (), (), (), (), False, Level.UNKNOWN)
    mask = int(mask)

    def named(bits: int) -> tuple[str, ...]:
        return tuple(nvml.decode(mask & bits))

    thermal, power, benign = named(THERMAL_REASONS), named(POWER_REASONS), named(BENIGN_REASONS)
    level = Level.CRIT if mask & CRIT_REASONS else Level.WARN if mask & WARN_REASONS else Level.OK
    return Throttle(
        mask, tuple(nvml.decode(mask)), thermal, power, benign, bool(thermal or power), level
    )


def power_vs_cap(
    reading: Reading, limits: GpuLimits | None, now: float, stale_after_s: float = STALE_AFTER_S
) -> float | None:
    """Fresh GPU power as a fraction of its enforced cap (`power_limit_w`, else the limits'
    `power_limit_max_w`); None when either is unknown or stale."""
    power = reading.fresh("power_w", now, stale_after_s)
    cap = reading.fresh("power_limit_w", now, stale_after_s)
    if cap is None and limits is not None:
        cap = limits.power_limit_max_w
    if power is None or cap is None or cap <= 0:
        return None
    return float(power) / float(cap)


@dataclass(frozen=True, slots=True)
class GpuSummary:
    temp_c: float | None
    power_w: float | None
    power_frac: float | None  # of the enforced cap
    headroom: Headroom
    throttle: Throttle
    ts: float | None
    stale: bool
    level: Level


def gpu_summary(
    reading: Reading, limits: GpuLimits | None, now: float, stale_after_s: float = STALE_AFTER_S
) -> GpuSummary:
    """One GPU: temperature, power, headroom, throttling and their worst level.

    A stale GPU is unknown. An absent clock-event mask (unsupported) is not throttling
    and does not make the GPU unknown; its headroom still must be known for "ok".
    """
    is_stale = stale(reading, now, stale_after_s)
    temp = reading.fresh("temp_gpu_c", now, stale_after_s)
    power = reading.fresh("power_w", now, stale_after_s)
    mask = reading.fresh("clock_event_reasons", now, stale_after_s)
    head = gpu_headroom(reading, limits, now, stale_after_s)
    throttle = throttle_state(None if mask is None else int(mask))
    # Stale: nothing is fresh, so there is no headroom and the level is unknown.
    level = head.level if mask is None else worst(head.level, throttle.level)
    return GpuSummary(
        None if temp is None else float(temp),
        None if power is None else float(power),
        power_vs_cap(reading, limits, now, stale_after_s),
        head,
        throttle,
        newest_ts(reading),
        is_stale,
        level,
    )


@dataclass(frozen=True, slots=True)
class NodeSummary:
    gpu_power_w: float | None  # sum over fresh GPUs reporting power
    power_w: float | None  # the node's own meter (IPMI/Redfish), when fresh
    max_temp_c: float | None  # hottest fresh GPU
    min_headroom_c: float | None  # least headroom to slowdown of any fresh GPU
    throttling_thermal: int  # GPUs in thermal slowdown
    throttling_power: int  # GPUs held by power cap or power brake
    stale_gpus: int
    inlet_c: float | None
    ts: float | None  # newest sample of the node or any GPU
    stale: bool  # nothing fresh at all
    level: Level
    # GPUs with nothing fresh while the node reports (`health.lost`): critical, not "no
    # data"; 0 when the node is silent (then its GPUs are unknown, counted in stale_gpus).
    lost_gpus: int = 0


@dataclass(frozen=True, slots=True)
class GpuTotals:
    """What a node's summary needs of its GPUs, already folded: `gpu_totals` folds the
    GPUs' readings; `fleet.read.summaries_sql` computes the same in the database (the fleet
    overview summarises every node without reading every GPU's figures)."""

    count: int  # GPUs with a latest state
    fresh: int  # of them, those not stale
    power_w: tuple[float, ...]  # the fresh power of each fresh GPU reporting one, GPU order
    max_temp_c: float | None  # hottest fresh GPU
    min_headroom_c: float | None  # least headroom to slowdown of any fresh GPU
    throttling_thermal: int  # fresh GPUs in thermal slowdown
    throttling_power: int  # fresh GPUs held by power cap or power brake
    level: Level  # the worst GPU level, stale GPUs included (unknown when count is 0)
    ts: float | None  # the newest sample of any GPU


def gpu_totals(
    gpus: Iterable[tuple[Reading, GpuLimits | None]],
    now: float,
    stale_after_s: float = STALE_AFTER_S,
) -> GpuTotals:
    """Fold a node's GPUs (in GPU order) into what `node_summary_of` needs."""
    summaries = [gpu_summary(r, lim, now, stale_after_s) for r, lim in gpus]
    fresh = [g for g in summaries if not g.stale]
    return GpuTotals(
        count=len(summaries),
        fresh=len(fresh),
        power_w=tuple(g.power_w for g in fresh if g.power_w is not None),
        max_temp_c=max((g.temp_c for g in fresh if g.temp_c is not None), default=None),
        min_headroom_c=min(
            (h for g in fresh if (h := g.headroom.slowdown_c) is not None), default=None
        ),
        throttling_thermal=sum(1 for g in fresh if g.throttle.thermal),
        throttling_power=sum(1 for g in fresh if g.throttle.power),
        level=worst(*(g.level for g in summaries)),
        ts=max((t for g in summaries if (t := g.ts) is not None), default=None),
    )


def node_summary(
    gpus: Iterable[tuple[Reading, GpuLimits | None]],
    node: Reading | None,
    now: float,
    stale_after_s: float = STALE_AFTER_S,
) -> NodeSummary:
    """The figures a fleet page shows per node, from its GPUs and its own reading."""
    return node_summary_of(gpu_totals(gpus, now, stale_after_s), node, now, stale_after_s)


def node_summary_of(
    gpus: GpuTotals, node: Reading | None, now: float, stale_after_s: float = STALE_AFTER_S
) -> NodeSummary:
    """`node_summary` from its GPUs already folded (`gpu_totals`, or the database)."""
    node = node or EMPTY
    node_power = node.fresh("power_w", now, stale_after_s)
    inlet = node.fresh("temp_inlet_c", now, stale_after_s)
    is_stale = not gpus.fresh and stale(node, now, stale_after_s)
    # The node reports (it or a GPU is fresh): its GPUs with nothing fresh are lost.
    lost = 0 if is_stale else gpus.count - gpus.fresh
    levels = [gpus.level] if gpus.count else []
    if lost:
        levels.append(LOST_LEVEL)
    if inlet is not None:
        levels.append(inlet_level(inlet))
    stamps = [t for t in (newest_ts(node), gpus.ts) if t is not None]
    return NodeSummary(
        gpu_power_w=round(sum(gpus.power_w), 1) if gpus.power_w else None,
        power_w=None if node_power is None else float(node_power),
        max_temp_c=gpus.max_temp_c,
        min_headroom_c=gpus.min_headroom_c,
        throttling_thermal=gpus.throttling_thermal,
        throttling_power=gpus.throttling_power,
        stale_gpus=gpus.count - gpus.fresh,
        inlet_c=None if inlet is None else float(inlet),
        ts=max(stamps, default=None),
        stale=is_stale,
        level=Level.UNKNOWN if is_stale else worst(*levels),
        lost_gpus=lost,
    )
