"""Fleetwatch's derived figures and levels, as pure functions.

Pages, the live payload, the alert rules and the Prometheus exporter all call these, so
a figure reads the same everywhere; the browser only renders the levels returned here.
No Django, no database: inputs are `Reading`s (latest value and sample time per metric,
names from agents/protocol/metrics.py) and the GPU's own limits from `gpu_info`.

A metric absent from a reading is unsupported or never seen: a normal value, never zero,
and never an error. A value older than `stale_after_s` is treated as absent.

Levels order crit > warn > unknown > ok: "unknown" (nothing fresh to judge) must never
read as ok, and must never hide a warn or crit found elsewhere.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from agents.protocol import reasons as nvml

# Seconds after which a sample no longer describes the present (dashboard/overview.py).
STALE_AFTER_S = 30.0

# GPU headroom to its own slowdown limit, °C (the thresholds static/dashboard/fleet.js
# applied). The limit is the device's own (NVML slowdown threshold, or the T.Limit form on
# newer drivers), not a fleet-wide temperature such as the community's 85/90 °C rules.
HEADROOM_WARN_C = 10.0
HEADROOM_CRIT_C = 3.0

# Rack power as a share of its inventory budget (the alert rules' "rack power ≥ 90 % and
# ≥ 100 % of budget"; budget = what the rack's primary feeds may carry, docs/inventory.md).
RACK_POWER_WARN_FRACTION = 0.90
RACK_POWER_CRIT_FRACTION = 1.00

# Inlet air, °C: ASHRAE TC 9.9 recommended range tops out at 27 °C for every class, and the
# A1 allowable range at 32 °C (shared/reference/domain.md §4).
INLET_RECOMMENDED_MAX_C = 27.0
INLET_ALLOWABLE_A1_MAX_C = 32.0

# Liquid loops. The supply limit is the ASHRAE W-class number (W17/W27/W32/W40/W45 = max
# supply °C; fleet.choices.LiquidClassChoices) or the loop's own `supply_limit_c`. Above it
# is crit; within the margin below it is warn (Fleetwatch's choice: the simulator's CDU
# setpoint sits 4 °C below the limit, so 2 °C means the plant has lost half its margin).
SUPPLY_WARN_MARGIN_C = 2.0
# Flow against the loop's rated flow (Redfish CoolantConnector RatedFlowLitersPerMinute).
# The rating is the CDU's maximum; variable-speed pumps run well below it at partial heat
# load (the demo's CDUs sit at 30–70 %), so a page level only flags a loop that is barely
# moving: under a tenth of rated warn, under 2 % crit (Fleetwatch's choice). A drop against
# the loop's own recent flow ("flow collapse") is an alert rule with a for-duration
# (docs/rules.md). Without a rating, only a flow stopped dead (≤ 1 L/min) is judged.
FLOW_WARN_FRACTION = 0.10
FLOW_CRIT_FRACTION = 0.02
FLOW_STOPPED_LPM = 1.0
# `leak`: 0 ok, 1 warning, 2 critical (metrics.py; Redfish LeakDetection OK/Warning/Critical).
LEAK_WARN = 1
LEAK_CRIT = 2

# Clock-event reasons (agents/protocol/reasons.py, NVML nvmlClocksEventReason*).
THERMAL_REASONS = nvml.HW_THERMAL_SLOWDOWN | nvml.SW_THERMAL_SLOWDOWN | nvml.HW_SLOWDOWN
POWER_REASONS = nvml.SW_POWER_CAP | nvml.HW_POWER_BRAKE_SLOWDOWN
BENIGN_REASONS = (
    nvml.GPU_IDLE | nvml.SYNC_BOOST | nvml.APPLICATIONS_CLOCKS_SETTING | nvml.DISPLAY_CLOCK_SETTING
)
# Crit: the GPU is cut ≥2× or slowed by heat, or its power delivery is braking it
# (reasons.HARMFUL). Holding itself at its power limit (SW power cap) is how a GPU runs
# at full load — counted as power throttling, but no warning by itself (every rack of a
# busy training fleet would be amber); "power cap sustained with clocks well under max"
# is an alert rule with a for-duration (docs/rules.md).
CRIT_REASONS = nvml.HARMFUL
WARN_REASONS = 0

# ISO/IEC 30134-2 PUE measurement categories: where IT energy is measured.
PUE_CATEGORIES: Mapping[int, str] = {
    0: "UPS output, peak demand",
    1: "UPS output",
    2: "PDU output",
    3: "IT equipment input",
}

PowerSource = Literal["pdu", "nodes", "gpus", "none"]


class Level(enum.StrEnum):
    """A judgement, serialised as its value. Severity: ok < unknown < warn < crit."""

    OK = "ok"
    UNKNOWN = "unknown"
    WARN = "warn"
    CRIT = "crit"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Level.OK: 0, Level.UNKNOWN: 1, Level.WARN: 2, Level.CRIT: 3}


def worst(*levels: Level) -> Level:
    """The most severe level; with nothing to judge, unknown (nothing is not "ok")."""
    return max(levels, key=_RANK.__getitem__, default=Level.UNKNOWN)


@dataclass(frozen=True, slots=True)
class Reading:
    """The latest value of each metric of one entity and when it was sampled."""

    values: Mapping[str, float | int]  # absent = unsupported or never seen
    ts: Mapping[str, float]  # metric name -> Unix time that value was sampled
    newest: float | None = None  # max of `ts` when the reader already knows it

    def age_s(self, name: str, now: float) -> float | None:
        """Seconds since `name` was sampled (a clock running ahead counts as now)."""
        if name not in self.values or (t := self.ts.get(name)) is None:
            return None
        return max(0.0, now - t)

    def fresh(self, name: str, now: float, stale_after_s: float) -> float | int | None:
        """The value of `name`, or None when it is missing or older than `stale_after_s`."""
        age = self.age_s(name, now)
        return self.values[name] if age is not None and age < stale_after_s else None


EMPTY = Reading({}, {})


@dataclass(frozen=True, slots=True)
class GpuLimits:
    """A GPU's own limits from `gpu_info` (docs/protocol.md); any may be unknown."""

    slowdown_c: float | None = None
    shutdown_c: float | None = None
    gpu_max_c: float | None = None
    mem_max_c: float | None = None
    tlimit_slowdown_c: float | None = None  # T.Limit offsets from max-operating
    tlimit_shutdown_c: float | None = None
    tlimit_gpu_max_c: float | None = None
    tlimit_mem_max_c: float | None = None
    power_limit_max_w: float | None = None


def newest_ts(reading: Reading) -> float | None:
    """When the newest value of `reading` was sampled, None when it holds nothing."""
    if reading.newest is not None:
        return reading.newest
    return max((t for n, t in reading.ts.items() if n in reading.values), default=None)


def stale(reading: Reading, now: float, stale_after_s: float = STALE_AFTER_S) -> bool:
    """True when nothing in `reading` was sampled within `stale_after_s` (or it is empty)."""
    ts = newest_ts(reading)
    return ts is None or max(0.0, now - ts) >= stale_after_s


def _rising(value: float | None, warn: float, crit: float, strict: bool = False) -> Level:
    """Higher is worse: crit at `crit`, warn at `warn` (above them when `strict`)."""
    if value is None:
        return Level.UNKNOWN
    if value > crit or (not strict and value == crit):
        return Level.CRIT
    return Level.WARN if value > warn or (not strict and value == warn) else Level.OK


def headroom_level(headroom_c: float | None) -> Level:
    """Level of a headroom to a GPU's own limit: ≤ 3 °C crit, ≤ 10 °C warn."""
    return _rising(None if headroom_c is None else -headroom_c, -HEADROOM_WARN_C, -HEADROOM_CRIT_C)


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


def inlet_level(temp_c: float | None) -> Level:
    """Inlet air: above ASHRAE's recommended 27 °C warn, above A1's allowable 32 °C crit."""
    return _rising(temp_c, INLET_RECOMMENDED_MAX_C, INLET_ALLOWABLE_A1_MAX_C, strict=True)


def leak_level(leak: float | None) -> Level:
    """A leak detector's state: 1 warn, 2 crit (unknown when not reported)."""
    return _rising(leak, LEAK_WARN, LEAK_CRIT)


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


def node_summary(
    gpus: Iterable[tuple[Reading, GpuLimits | None]],
    node: Reading | None,
    now: float,
    stale_after_s: float = STALE_AFTER_S,
) -> NodeSummary:
    """The figures a fleet page shows per node, from its GPUs and its own reading."""
    node = node or EMPTY
    summaries = [gpu_summary(r, lim, now, stale_after_s) for r, lim in gpus]
    fresh = [g for g in summaries if not g.stale]
    power = [g.power_w for g in fresh if g.power_w is not None]
    temps = [g.temp_c for g in fresh if g.temp_c is not None]
    heads = [h for g in fresh if (h := g.headroom.slowdown_c) is not None]
    node_power = node.fresh("power_w", now, stale_after_s)
    inlet = node.fresh("temp_inlet_c", now, stale_after_s)
    is_stale = not fresh and stale(node, now, stale_after_s)
    levels = [g.level for g in summaries]
    if inlet is not None:
        levels.append(inlet_level(inlet))
    stamps = [t for t in (newest_ts(node), *(g.ts for g in summaries)) if t is not None]
    return NodeSummary(
        gpu_power_w=round(sum(power), 1) if power else None,
        power_w=None if node_power is None else float(node_power),
        max_temp_c=max(temps, default=None),
        min_headroom_c=min(heads, default=None),
        throttling_thermal=sum(1 for g in fresh if g.throttle.thermal),
        throttling_power=sum(1 for g in fresh if g.throttle.power),
        stale_gpus=len(summaries) - len(fresh),
        inlet_c=None if inlet is None else float(inlet),
        ts=max(stamps, default=None),
        stale=is_stale,
        level=Level.UNKNOWN if is_stale else worst(*levels),
    )


def rack_power(
    rack: Reading | None,
    nodes: Sequence[NodeSummary],
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
        levels.append(Level.WARN if failed > 0 else Level.OK)
    if running is not None:
        levels.append(Level.CRIT if running <= 0 else Level.OK)
    if leak is not None:
        levels.append(leak_level(leak))
    if reservoir is not None:
        levels.append(Level.WARN if reservoir else Level.OK)
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


def pue(total_power_w: float | None, it_power_w: float | None) -> float | None:
    """PUE = total facility power / IT power (The Green Grid; ISO/IEC 30134-2)."""
    if total_power_w is None or it_power_w is None or it_power_w <= 0:
        return None
    return float(total_power_w) / float(it_power_w)


def pue_category(category: int | None) -> str | None:
    """Where IT power was measured for an ISO/IEC 30134-2 category (0–3), else None."""
    return None if category is None else PUE_CATEGORIES.get(int(category))


def facility_pue(
    reading: Reading, now: float, stale_after_s: float = STALE_AFTER_S
) -> tuple[float | None, int | None]:
    """A site's live PUE and its category from its `facility` sample: total / IT, else the
    reported `pue`. Instantaneous, so operational, not a reportable (annual) PUE; a figure
    without a known category is withheld, as PUE v2 requires the category with every figure."""
    raw_cat = reading.fresh("pue_category", now, stale_after_s)
    category = None if raw_cat is None else int(raw_cat)
    if pue_category(category) is None:
        return None, None
    value = pue(
        reading.fresh("total_power_w", now, stale_after_s),
        reading.fresh("it_power_w", now, stale_after_s),
    )
    if value is None and (reported := reading.fresh("pue", now, stale_after_s)) is not None:
        value = float(reported)
    return value, category


# Figures the alert rules need beyond the summaries above (fleet/alerts/signals.py names
# each one as a signal's source).


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


def silent_intervals(last_seen: float | None, now: float, interval_s: float) -> float | None:
    """How many sampling intervals have passed since a source's last batch; None when it
    never reported (a source never enrolled is not silent, it is absent)."""
    if last_seen is None or interval_s <= 0:
        return None
    return max(0.0, now - last_seen) / interval_s


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
