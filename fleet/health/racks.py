"""Rack power with where it came from, against its budget, and the rack's state."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from fleet.health.gpus import NodeSummary
from fleet.health.levels import (
    EMPTY,
    Level,
    Reading,
    _rising,
    inlet_level,
    leak_level,
    newest_ts,
    stale,
    worst,
)
from fleet.health.thresholds import (
    RACK_POWER_CRIT_FRACTION,
    RACK_POWER_WARN_FRACTION,
    STALE_AFTER_S,
    PowerSource,
)


class NodePowerLike(Protocol):
    """What rack power needs of a node: a `NodeSummary` or the lighter `NodePower`."""

    @property
    def power_w(self) -> float | None: ...
    @property
    def gpu_power_w(self) -> float | None: ...
    @property
    def stale(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class NodePower:
    """A node's power figures alone: what `node_summary` says of them, without judging
    every GPU's heat (the alert engine sums rack power for every rack every 10 s)."""

    power_w: float | None
    gpu_power_w: float | None
    stale: bool


def node_power(
    gpus: Iterable[Reading],
    node: Reading | None,
    now: float,
    stale_after_s: float = STALE_AFTER_S,
) -> NodePower:
    """The node's own meter when fresh, the sum of its fresh GPUs' power, and whether
    nothing of it is fresh — the same figures `node_summary` gives."""
    node = node or EMPTY
    watts: list[float] = []
    any_fresh = False
    for reading in gpus:
        if stale(reading, now, stale_after_s):
            continue
        any_fresh = True
        power = reading.fresh("power_w", now, stale_after_s)
        if power is not None:
            watts.append(float(power))
    meter = node.fresh("power_w", now, stale_after_s)
    return NodePower(
        power_w=None if meter is None else float(meter),
        gpu_power_w=round(sum(watts), 1) if watts else None,
        stale=not any_fresh and stale(node, now, stale_after_s),
    )


def rack_power(
    rack: Reading | None,
    nodes: Sequence[NodePowerLike],
    now: float,
    stale_after_s: float = STALE_AFTER_S,
) -> tuple[float | None, PowerSource]:
    """Rack power in kW and where it came from: the PDUs when fresh, else the sum of node
    meters when every fresh node has one, else the sum of GPU power (an undercount)."""
    pdu = (rack or EMPTY).fresh("power_w", now, stale_after_s)
    if pdu is not None:
        return float(pdu) / 1000.0, "pdu"
    fresh = [n for n in nodes if not n.stale]
    meters = [n.power_w for n in fresh if n.power_w is not None]
    if fresh and len(meters) == len(fresh):
        return sum(meters) / 1000.0, "nodes"
    gpu = [n.gpu_power_w for n in fresh if n.gpu_power_w is not None]
    if gpu:
        return sum(gpu) / 1000.0, "gpus"
    return None, "none"


def rack_power_level(kw: float | None, budget_kw: float | None) -> Level:
    """Rack power against its budget: ≥ 90 % warn, ≥ 100 % crit; unknown without both."""
    if kw is None or budget_kw is None or budget_kw <= 0:
        return Level.UNKNOWN
    return _rising(kw / budget_kw, RACK_POWER_WARN_FRACTION, RACK_POWER_CRIT_FRACTION)


@dataclass(frozen=True, slots=True)
class RackSummary:
    power_kw: float | None
    power_source: PowerSource
    power_pct: float | None  # of budget
    power_level: Level
    min_headroom_c: float | None
    max_temp_c: float | None
    throttling_thermal: int
    throttling_power: int
    inlet_c: float | None  # the rack's sensor, else its hottest node inlet
    leak: int | None
    ts: float | None
    stale: bool
    level: Level


def rack_summary(
    rack: Reading | None,
    nodes: Sequence[NodeSummary],
    budget_kw: float | None,
    now: float,
    stale_after_s: float = STALE_AFTER_S,
) -> RackSummary:
    """A rack's figures and the worst of power, GPU heat and throttling, inlet air, leak
    and staleness: a throttled rack drawing little power is worse, not calmer."""
    rack = rack or EMPTY
    kw, source = rack_power(rack, nodes, now, stale_after_s)
    fresh = [n for n in nodes if not n.stale]
    heads = [n.min_headroom_c for n in fresh if n.min_headroom_c is not None]
    temps = [n.max_temp_c for n in fresh if n.max_temp_c is not None]
    inlet = rack.fresh("temp_inlet_c", now, stale_after_s)
    if inlet is None:
        inlet = max((n.inlet_c for n in fresh if n.inlet_c is not None), default=None)
    leak = rack.fresh("leak", now, stale_after_s)
    power_level = rack_power_level(kw, budget_kw)
    levels = [power_level, *(n.level for n in nodes)]
    if inlet is not None:
        levels.append(inlet_level(inlet))
    if leak is not None:
        levels.append(leak_level(leak))
    is_stale = not fresh and stale(rack, now, stale_after_s)
    stamps = [t for t in (newest_ts(rack), *(n.ts for n in nodes)) if t is not None]
    return RackSummary(
        power_kw=kw,
        power_source=source,
        power_pct=None if kw is None or not budget_kw else 100.0 * kw / budget_kw,
        power_level=power_level,
        min_headroom_c=min(heads, default=None),
        max_temp_c=max(temps, default=None),
        throttling_thermal=sum(n.throttling_thermal for n in fresh),
        throttling_power=sum(n.throttling_power for n in fresh),
        inlet_c=None if inlet is None else float(inlet),
        leak=None if leak is None else int(leak),
        ts=max(stamps, default=None),
        stale=is_stale,
        level=Level.UNKNOWN if is_stale else worst(*levels),
    )


def n_plus_one_kw(available_kw: list[float]) -> float:
    """What a rack's feeds carry with any one of them lost (N+1): all less the largest (0
    with one). The one rule for it: the capacity answer, the demo's feed check."""
    return sum(available_kw) - max(available_kw, default=0.0)
