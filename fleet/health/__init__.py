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

from fleet.health.cooling import LoopSummary, flow_level, loop_summary, supply_level
from fleet.health.facility import facility_pue, pue, pue_category
from fleet.health.gpus import (
    GpuSummary,
    GpuTotals,
    Headroom,
    NodeSummary,
    Throttle,
    gpu_headroom,
    gpu_summary,
    gpu_totals,
    node_summary,
    node_summary_of,
    power_vs_cap,
    throttle_state,
)
from fleet.health.levels import (
    EMPTY,
    GpuLimits,
    Level,
    Reading,
    headroom_level,
    inlet_level,
    leak_level,
    newest_ts,
    stale,
    worst,
)
from fleet.health.racks import (
    NodePower,
    RackSummary,
    node_power,
    rack_power,
    rack_power_level,
    rack_summary,
)
from fleet.health.rules import (
    feed_load_fraction,
    field_lag,
    gpu_missing,
    power_capped_clock_fraction,
    power_fraction,
    silent_intervals,
    supply_over_limit_c,
)
from fleet.health.thresholds import (
    BENIGN_REASONS,
    CRIT_REASONS,
    FLOW_CRIT_FRACTION,
    FLOW_STOPPED_LPM,
    FLOW_WARN_FRACTION,
    HEADROOM_CRIT_C,
    HEADROOM_WARN_C,
    INLET_ALLOWABLE_A1_MAX_C,
    INLET_RECOMMENDED_MAX_C,
    LEAK_CRIT,
    LEAK_WARN,
    POWER_REASONS,
    PUE_CATEGORIES,
    RACK_POWER_CRIT_FRACTION,
    RACK_POWER_WARN_FRACTION,
    STALE_AFTER_S,
    SUPPLY_WARN_MARGIN_C,
    THERMAL_REASONS,
    WARN_REASONS,
    PowerSource,
)

__all__ = [
    "BENIGN_REASONS",
    "CRIT_REASONS",
    "EMPTY",
    "FLOW_CRIT_FRACTION",
    "FLOW_STOPPED_LPM",
    "FLOW_WARN_FRACTION",
    "HEADROOM_CRIT_C",
    "HEADROOM_WARN_C",
    "INLET_ALLOWABLE_A1_MAX_C",
    "INLET_RECOMMENDED_MAX_C",
    "LEAK_CRIT",
    "LEAK_WARN",
    "POWER_REASONS",
    "PUE_CATEGORIES",
    "RACK_POWER_CRIT_FRACTION",
    "RACK_POWER_WARN_FRACTION",
    "STALE_AFTER_S",
    "SUPPLY_WARN_MARGIN_C",
    "THERMAL_REASONS",
    "WARN_REASONS",
    "GpuLimits",
    "GpuSummary",
    "GpuTotals",
    "Headroom",
    "Level",
    "LoopSummary",
    "NodePower",
    "NodeSummary",
    "PowerSource",
    "RackSummary",
    "Reading",
    "Throttle",
    "facility_pue",
    "feed_load_fraction",
    "field_lag",
    "flow_level",
    "gpu_headroom",
    "gpu_missing",
    "gpu_summary",
    "gpu_totals",
    "headroom_level",
    "inlet_level",
    "leak_level",
    "loop_summary",
    "newest_ts",
    "node_power",
    "node_summary",
    "node_summary_of",
    "power_capped_clock_fraction",
    "power_fraction",
    "power_vs_cap",
    "pue",
    "pue_category",
    "rack_power",
    "rack_power_level",
    "rack_summary",
    "silent_intervals",
    "stale",
    "supply_level",
    "supply_over_limit_c",
    "throttle_state",
    "worst",
]
