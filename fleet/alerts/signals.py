"""The catalogue of signals an alert rule may watch, as data.

A signal is a number per entity of one scope: a raw gauge from the metric catalogue
(agents/protocol/metrics.py, the latest value read through fleet/read/state.py), a figure
derived by a `fleet.health` function, a count of agent events in a window, a fact
about the source itself (silent, a field lagging), or who holds a GPU and whether it
idles (`workloads:`). Flags are 1 (true) or 0 (false).
A signal with no value for an entity (unsupported, stale, nothing to judge) makes no
instance: "no value" is never "ok" and never "firing".

`source` says how the engine computes it: `metric:<name>` reads the latest value of
that metric of the scope's sample kind; `health:<function>` calls that function in
fleet/health/ (`.field` names a part of what it returns); `events:<kind>` counts
stored events (fleet.models.Event) of that kind over the rule's `window_s`;
`workloads:<what>` joins the latest state with the open allocations
(fleet/alerts/holders.py); `forecast:<subject>` reads this minute's time-to-limit forecasts
(fleet/alerts/evaluate_forecast.py); `fabric:<what>` judges each node's InfiniBand/RoCE
ports (fleet/alerts/evaluate_fabric.py), `nvlink:<what>` each GPU's NVLink error totals
(fleet/alerts/evaluate_nvlink.py); `health_record:<state>` reads this minute's GPU health
states (fleet/alerts/evaluate_health.py); `remote_write:lag` how far remote write is behind
(fleet/alerts/evaluate_remote_write.py).
"""

from __future__ import annotations

from agents.protocol.metrics import METRICS, SampleKind
from fleet.alerts.signal_model import WINDOW, Param, ParamType, Signal
from fleet.alerts.signals_foresight import (
    FABRIC,
    FORECAST,
    FORECAST_PLACEHOLDERS,
    FORECAST_SIGNALS,
    HEALTH,
    HEALTH_SIGNALS,
)
from fleet.alerts.signals_remote_write import REMOTE_WRITE
from fleet.health.cadence import LAG_INTERVALS

__all__ = (
    "BY_KEY",
    "COMMON_PLACEHOLDERS",
    "CONTAINED_XIDS",
    "FATAL_XIDS",
    "FORECAST_PLACEHOLDERS",
    "FORECAST_SIGNALS",
    "HEALTH_SIGNALS",
    "INTERVAL",
    "LAG_METRICS",
    "NAMES",
    "SCOPE_PLACEHOLDERS",
    "SCOPE_SAMPLE_KIND",
    "SIGNALS",
    "WINDOW",
    "Param",
    "ParamType",
    "Signal",
    "get",
    "is_cooling_symptom",
    "placeholders",
    "scopes_of",
)

# Rule scope -> the sample kind its raw metrics come from.
SCOPE_SAMPLE_KIND: dict[str, SampleKind] = {
    "gpu": "gpu",
    "node": "node",
    "rack": "rack",
    "feed": "feed",
    "loop": "loop",
    "site": "facility",
}

# Placeholders every summary may use, and those naming the entity at each scope.
COMMON_PLACEHOLDERS: tuple[str, ...] = (
    "rule",
    "signal",
    "severity",
    "value",
    "unit",
    "threshold",
    "clear_threshold",
)
SCOPE_PLACEHOLDERS: dict[str, tuple[str, ...]] = {
    # owner, user, workload: who holds the GPU (empty when nothing does; holders.py)
    "gpu": (
        "site",
        "hall",
        "rack",
        "node",
        "gpu",
        "gpu_uuid",
        "gpu_model",
        "owner",
        "user",
        "workload",
    ),
    "node": ("site", "hall", "rack", "node"),
    "rack": ("site", "hall", "rack"),
    "feed": ("site", "hall", "rack", "feed"),
    "loop": ("site", "loop"),
    "site": ("site",),
}


# Parameters shared by several signals.
# Unset (the default): each source is judged by its own batch interval, as it declared it
# (fleet/health/cadence.py). Set, it judges every source of the rule by this one instead.
INTERVAL = Param(
    "interval_s",
    "float",
    None,
    "override (s): judge every source by this interval instead of its own batch interval",
)
LAG_METRICS = Param(
    "metrics", "metric_list", (), "only these fields (default: every field it has sent)"
)
# Always-fatal XIDs per DCGM's health watch (NVIDIA/DCGM modules/health/DcgmHealthWatch.cpp):
# 48 DBE, 74 NVLink, 79 fell off the bus, 95 uncontained ECC, 119/120 GSP, 140 ECC
# unrecovered; 94 (contained ECC) is WARN there and has its own built-in rule.
FATAL_XIDS: tuple[int, ...] = (48, 74, 79, 95, 119, 120, 140)
CONTAINED_XIDS: tuple[int, ...] = (94,)

_DERIVED: tuple[Signal, ...] = (
    # GPU: the device's own limits and its clock-event reasons.
    Signal(
        "headroom_slowdown_c",
        "gpu",
        "°C",
        "headroom to the GPU's own slowdown limit",
        "health:gpu_headroom.slowdown_c",
    ),
    Signal(
        "headroom_hbm_c",
        "gpu",
        "°C",
        "headroom of HBM to its own max operating temperature",
        "health:gpu_headroom.mem_max_c",
    ),
    Signal(
        "power_cap_fraction",
        "gpu",
        "",
        "power as a fraction of the enforced cap",
        "health:power_vs_cap",
    ),
    Signal(
        "hw_thermal_slowdown",
        "gpu",
        "flag",
        "HW thermal slowdown active (NVML 0x40)",
        "health:throttle_state.thermal",
    ),
    Signal(
        "sw_thermal_slowdown",
        "gpu",
        "flag",
        "SW thermal slowdown active (NVML 0x20)",
        "health:throttle_state.thermal",
    ),
    Signal(
        "hw_slowdown_unexplained",
        "gpu",
        "flag",
        "HW slowdown (0x8, clocks ≥2× cut) with neither HW thermal (0x40) nor HW power "
        "brake (0x80) set, which have signals of their own",
        "health:throttle_state.thermal",
    ),
    Signal(
        "hw_power_brake",
        "gpu",
        "flag",
        "HW power brake asserted, e.g. by the PSU (0x80)",
        "health:throttle_state.power",
    ),
    Signal(
        "sw_power_cap",
        "gpu",
        "flag",
        "clocks cut to stay under the power limit (0x4)",
        "health:throttle_state.power",
    ),
    Signal(
        "power_capped_clock_fraction",
        "gpu",
        "",
        "SM clock over the GPU's max while SW power cap is set (none when not capped)",
        "health:power_capped_clock_fraction",
        params=(
            Param(
                "clock_max_mhz",
                "float",
                None,
                "max SM clock (MHz) where gpu_info does not report one",
            ),
        ),
    ),
    Signal(
        "allocated_idle",
        "gpu",
        "flag",
        "an open scheduler or exporter allocation holds the GPU while its utilisation is "
        "under the ledger's idle threshold and its power near idle (fleet/read/"
        "ledger_rules.py); no value when nothing holds it",
        "workloads:allocated_idle",
        absent_clears=True,
    ),
    Signal(
        "gpu_missing",
        "gpu",
        "flag",
        "in the inventory but nothing fresh while its node reports",
        "health:gpu_missing",
    ),
    Signal(
        "ecc_dbe_events",
        "gpu",
        "",
        "double-bit ECC error events in the window",
        "events:ecc_dbe",
        params=(WINDOW,),
    ),
    Signal(
        "xid_events",
        "gpu",
        "",
        "XID events with one of the codes, in the window",
        "events:xid",
        params=(WINDOW, Param("codes", "int_list", FATAL_XIDS, "XID codes")),
        placeholders=("xid",),
    ),
    Signal(
        "gpu_lost_events",
        "gpu",
        "",
        "the agent lost the GPU (NVML), in the window",
        "events:gpu_lost",
        params=(WINDOW,),
    ),
    # Racks, feeds, loops and sites against their inventory ratings.
    Signal(
        "rack_power_fraction",
        "rack",
        "",
        "rack power over its budget (1.0 = at budget)",
        "health:power_fraction",
    ),
    Signal(
        "feed_load_fraction",
        "feed",
        "",
        "feed power over its continuous rating",
        "health:feed_load_fraction",
    ),
    Signal(
        "supply_over_limit_c",
        "loop",
        "°C",
        "supply above the loop's W-class (or own) limit; negative below it",
        "health:supply_over_limit_c",
    ),
    Signal(
        "loop_delta_c",
        "loop",
        "°C",
        "return minus supply (reported, else computed)",
        "health:loop_summary.delta_c",
    ),
    Signal(
        "flow_fraction",
        "loop",
        "",
        "secondary flow over the loop's rated flow",
        "health:loop_summary.flow_frac",
    ),
    Signal(
        "pue",
        "site",
        "",
        "live PUE (total / IT), withheld without a category",
        "health:facility_pue",
        # PUE targets differ per site (climate, design); the threshold is the default target.
        params=(
            Param("site_targets", "site_map", None, "target per site slug, e.g. {'lon1': 1.3}"),
        ),
    ),
)

# The source itself: silent, or sending while one of its fields stopped.
_SILENT_SCOPES = {
    "node": "node agent",
    "rack": "rack collector",
    "loop": "loop collector",
    "site": "facility agent",
}
_SOURCE: tuple[Signal, ...] = (
    *(
        Signal(
            "agent_silent_intervals",
            scope,
            "intervals",
            f"batch intervals since the {who}'s last batch (the source's own, as declared)",
            "health:silent_intervals",
            params=(INTERVAL,),
        )
        for scope, who in _SILENT_SCOPES.items()
    ),
    *(
        Signal(
            "metric_lag_s",
            scope,
            "s",
            "how far the most-lagging field trails the entity's newest sample (a metric "
            "that stopped arriving while its agent still reports); 0 within "
            f"{LAG_INTERVALS:g} of the source's batch intervals",
            "health:field_lag",
            params=(LAG_METRICS, INTERVAL),
            placeholders=("metric",),
        )
        for scope in SCOPE_SAMPLE_KIND
    ),
)


# Signals a failing cooling loop produces in what it cools: a GPU, node or rack alert on
# one of these, in a rack whose loop is alerting, is grouped under the loop's alert
# (fleet/alerts/grouping.py): the loop is the cause, they are its symptoms.
_THERMAL_DERIVED = frozenset(
    {
        "headroom_slowdown_c",
        "headroom_hbm_c",
        "hw_thermal_slowdown",
        "sw_thermal_slowdown",
        "headroom_minutes_to_limit",
    }
)


def is_cooling_symptom(scope: str, name: str) -> bool:
    """A thermal signal of something a loop cools: the derived thermal figures, or a raw
    temperature (°C) of a GPU, node or rack."""
    if scope not in ("gpu", "node", "rack"):
        return False
    return name in _THERMAL_DERIVED or name.endswith("_c")


def _raw_signals() -> tuple[Signal, ...]:
    # Gauges only: a threshold on a cumulative counter means nothing; counters reach
    # rules through a derived signal (a rate, an event count) instead. A derived signal
    # of the same name (the site's `pue`: computed, else reported) takes its place.
    derived = {s.key for s in _DERIVED}
    return tuple(
        Signal(m.name, scope, _unit(m.name), m.help, f"metric:{m.name}")
        for scope, kind in SCOPE_SAMPLE_KIND.items()
        for m in METRICS[kind]
        if m.kind == "gauge" and (scope, m.name) not in derived
    )


def _unit(name: str) -> str:
    suffixes = {
        "_c": "°C",
        "_w": "W",
        "_pct": "%",
        "_lpm": "L/min",
        "_kpa": "kPa",
        "_mhz": "MHz",
        "_mib": "MiB",
        "_v": "V",
        "_a": "A",
        "_kw": "kW",
        "_bytes_s": "B/s",
        "_kib_s": "KiB/s",
    }
    return next((u for s, u in suffixes.items() if name.endswith(s)), "")


SIGNALS: tuple[Signal, ...] = (
    *_raw_signals(),
    *_DERIVED,
    *FORECAST,
    *FABRIC,
    *HEALTH,
    *_SOURCE,
    *REMOTE_WRITE,
)
BY_KEY: dict[tuple[str, str], Signal] = {s.key: s for s in SIGNALS}
NAMES: frozenset[str] = frozenset(s.name for s in SIGNALS)


def get(scope: str, name: str) -> Signal | None:
    """The signal `name` at `scope`, None when there is none."""
    return BY_KEY.get((scope, name))


def scopes_of(name: str) -> tuple[str, ...]:
    """The scopes where a signal of this name exists (for an error that helps)."""
    return tuple(s.scope for s in SIGNALS if s.name == name)


def placeholders(scope: str, signal: Signal | None) -> frozenset[str]:
    """Every placeholder a summary may use at `scope` for `signal`."""
    extra = () if signal is None else signal.placeholders
    return frozenset((*COMMON_PLACEHOLDERS, *SCOPE_PLACEHOLDERS.get(scope, ()), *extra))
