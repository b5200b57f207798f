"""The built-in rule pack; fleet/alerts/install.py installs it by stable key.

Installing is a three-way merge per field. Each built-in rule remembers the pack's
values as last installed (`AlertRule.pack_values`): a field still equal to them was not
edited and follows the new pack; a field the operator changed is theirs and is kept.
A merge that would not validate (a new pack threshold beyond an edited clear threshold)
leaves the rule as it was and is reported. Sources of every threshold: docs/rules.md.
"""

from __future__ import annotations

from fleet.alerts import signals
from fleet.alerts.rulepack_fabric import FABRIC_RULES
from fleet.alerts.rulepack_forecast import FORECAST_RULES
from fleet.alerts.rulepack_health import HEALTH_RULES
from fleet.alerts.rulespec import FACILITY, GPU_NAME, RuleSpec
from fleet.health import thresholds
from fleet.read.ledger_rules import DEFAULT_RULES as LEDGER

XID_RUNBOOK = "https://docs.nvidia.com/deploy/xid-errors/index.html"
MEMORY_RUNBOOK = "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html"

# A rule at a level the pages show reads the page's threshold (fleet/health/thresholds.py)
# with the page's comparison, so the page and the alert agree at the boundary itself
# (tests/alerts/test_page_rule_boundaries.py); for-durations and clear thresholds are the
# rules' own (a page shows the present, an alert waits out noise).
_GPU = GPU_NAME
_HC, _HW = thresholds.HEADROOM_CRIT_C, thresholds.HEADROOM_WARN_C
_INLET_REC, _INLET_A1 = thresholds.INLET_RECOMMENDED_MAX_C, thresholds.INLET_ALLOWABLE_A1_MAX_C

GPU_RULES: tuple[RuleSpec, ...] = (
    RuleSpec(
        "gpu-headroom-low",
        "GPU near its slowdown limit",
        "gpu",
        "headroom_slowdown_c",
        "le",
        _HW,
        _HW + 2,
        120,
        "warning",
        _GPU + " is {value:.0f} °C from its own slowdown limit",
        "Headroom to the GPU's own slowdown temperature, not a fleet-wide figure.",
    ),
    RuleSpec(
        "gpu-headroom-critical",
        "GPU at its slowdown limit",
        "gpu",
        "headroom_slowdown_c",
        "le",
        _HC,
        _HC + 2,
        30,
        "critical",
        _GPU + " is {value:.0f} °C from its own slowdown limit",
        "Within 3 °C of slowdown the driver is about to cut clocks.",
    ),
    RuleSpec(
        "gpu-hw-thermal-slowdown",
        "HW thermal slowdown",
        "gpu",
        "hw_thermal_slowdown",
        "ge",
        1,
        None,
        30,
        "critical",
        _GPU + " is in HW thermal slowdown (clocks ≥2× cut)",
        "NVML clock-event reason 0x40: the hardware halves clocks or more to cool down.",
    ),
    RuleSpec(
        "gpu-hw-slowdown",
        "HW slowdown",
        "gpu",
        "hw_slowdown_unexplained",
        "ge",
        1,
        None,
        30,
        "critical",
        _GPU + " is in HW slowdown (clocks ≥2× cut) with no thermal or power-brake reason",
        "NVML reason 0x8 alone: the hardware cuts clocks ≥2× (over-power, an external "
        "slowdown signal); with 0x40 or 0x80 set, those rules fire instead.",
    ),
    RuleSpec(
        "gpu-sw-thermal-slowdown",
        "SW thermal slowdown sustained",
        "gpu",
        "sw_thermal_slowdown",
        "ge",
        1,
        None,
        180,
        "critical",
        _GPU + " has been in SW thermal slowdown for 3 minutes",
        "NVML reason 0x20: the driver keeps GPU or HBM under max operating temperature.",
    ),
    RuleSpec(
        "gpu-hw-power-brake",
        "HW power brake",
        "gpu",
        "hw_power_brake",
        "ge",
        1,
        None,
        0,
        "critical",
        _GPU + " is braked by an external power-brake signal",
        "NVML reason 0x80, asserted by the PSU or power shelf: a facility power event.",
        labels=FACILITY,
    ),
    RuleSpec(
        "gpu-power-cap-low-clocks",
        "Power-capped well under max clocks",
        "gpu",
        "power_capped_clock_fraction",
        "lt",
        0.7,
        0.8,
        300,
        "warning",
        _GPU + " is power-capped at {value:.0%} of its max SM clock",
        "SW power cap (0x4) held for 5 minutes with the SM clock under 70 % of max.",
        params={"clock_max_mhz": 1980.0},
    ),
    RuleSpec(
        "gpu-hbm-headroom-low",
        "HBM near its max temperature",
        "gpu",
        "headroom_hbm_c",
        "le",
        _HW,
        _HW + 2,
        120,
        "warning",
        _GPU + " HBM is {value:.0f} °C from its max",
        "HBM against its own max operating temperature (95 °C on H100/A100).",
    ),
    RuleSpec(
        "gpu-hbm-headroom-critical",
        "HBM at its max temperature",
        "gpu",
        "headroom_hbm_c",
        "le",
        _HC,
        _HC + 2,
        30,
        "critical",
        _GPU + " HBM is {value:.0f} °C from its max",
        "Within 3 °C of HBM max operating temperature the driver is about to slow the GPU.",
    ),
    RuleSpec(
        "gpu-ecc-dbe",
        "ECC double-bit error",
        "gpu",
        "ecc_dbe_events",
        "ge",
        1,
        None,
        0,
        "critical",
        _GPU + " reported {value:.0f} uncorrectable (DBE) ECC error(s)",
        "An uncorrectable memory error: the job on it is likely corrupt.",
        runbook_url=MEMORY_RUNBOOK,
    ),
    RuleSpec(
        "gpu-row-remap-failure",
        "Row-remap failure",
        "gpu",
        "remap_failure",
        "ge",
        1,
        None,
        0,
        "critical",
        _GPU + " failed to remap a memory row",
        "DCGM's health watch FAILs on a remap failure (XID 64): the GPU needs service.",
        runbook_url=MEMORY_RUNBOOK,
    ),
    RuleSpec(
        "gpu-xid-fatal",
        "Fatal XID",
        "gpu",
        "xid_events",
        "ge",
        1,
        None,
        0,
        "critical",
        _GPU + " reported XID {xid}",
        "XIDs DCGM's health watch treats as always fatal.",
        params={"codes": list(signals.FATAL_XIDS)},
        runbook_url=XID_RUNBOOK,
    ),
    RuleSpec(
        "gpu-xid-contained",
        "Contained ECC error (XID 94)",
        "gpu",
        "xid_events",
        "ge",
        1,
        None,
        0,
        "warning",
        _GPU + " reported XID {xid} (contained; the app was stopped)",
        "DCGM WARNs on XID 94: the error was contained to one application.",
        params={"codes": list(signals.CONTAINED_XIDS)},
        runbook_url=XID_RUNBOOK,
    ),
    RuleSpec(
        "gpu-missing",
        "GPU missing from its node",
        "gpu",
        "gpu_missing",
        "ge",
        1,
        None,
        60,
        "critical",
        _GPU + " sends nothing while {node} still reports",
        "A GPU in the inventory fell silent while its node reports: off the bus or lost.",
    ),
)

AIR_RULES: tuple[RuleSpec, ...] = tuple(
    RuleSpec(
        f"{scope}-inlet-{suffix}",
        f"{who} inlet above {what}",
        scope,
        "temp_inlet_c",
        "gt",
        limit,
        limit - 1,
        for_s,
        severity,
        f"{{{scope}}} inlet air {{value:.1f}} °C",
        f"ASHRAE TC 9.9 {what} inlet maximum, {limit:g} °C.",
    )
    for scope, who in (("rack", "Rack"), ("node", "Node"))
    for suffix, what, limit, for_s, severity in (
        ("recommended", "recommended", _INLET_REC, 300, "warning"),
        ("allowable", "A1 allowable", _INLET_A1, 60, "critical"),
    )
)

POWER_RULES: tuple[RuleSpec, ...] = (
    RuleSpec(
        "rack-power-90",
        "Rack power ≥ 90 % of budget",
        "rack",
        "rack_power_fraction",
        "ge",
        thresholds.RACK_POWER_WARN_FRACTION,
        0.85,
        300,
        "warning",
        "{rack} draws {value:.0%} of its power budget",
        "Rack power against its budget.",
        labels=FACILITY,
    ),
    RuleSpec(
        "rack-power-100",
        "Rack power at or over budget",
        "rack",
        "rack_power_fraction",
        "ge",
        thresholds.RACK_POWER_CRIT_FRACTION,
        0.95,
        60,
        "critical",
        "{rack} draws {value:.0%} of its power budget",
        "Rack power at or over budget.",
        labels=FACILITY,
    ),
    RuleSpec(
        "feed-over-rating",
        "Feed over its rating",
        "feed",
        "feed_load_fraction",
        "gt",
        1.0,
        0.95,
        60,
        "critical",
        "{rack} feed {feed} carries {value:.0%} of its rating",
        "Feed power over V × A × max utilisation (× √3 three-phase).",
        labels=FACILITY,
    ),
    RuleSpec(
        "site-pue-above-target",
        "PUE above target",
        "site",
        "pue",
        "gt",
        1.5,
        1.45,
        900,
        "warning",
        "{site} PUE {value:.2f} above its target {threshold:.2f}",
        "Live PUE over the site's target for 15 minutes; targets per site in params.",
        labels=FACILITY,
    ),
)

LOOP_RULES: tuple[RuleSpec, ...] = (
    RuleSpec(
        "loop-supply-over-limit",
        "CDU supply above its class limit",
        "loop",
        "supply_over_limit_c",
        "gt",
        0,
        -1,
        60,
        "critical",
        "{loop} supply {value:+.1f} °C over its limit",
        "Secondary supply above the loop's ASHRAE W-class (or own) limit.",
        labels=FACILITY,
    ),
    RuleSpec(
        "loop-supply-near-limit",
        "CDU supply near its class limit",
        "loop",
        "supply_over_limit_c",
        "gt",
        -thresholds.SUPPLY_WARN_MARGIN_C,
        -thresholds.SUPPLY_WARN_MARGIN_C - 1,
        120,
        "warning",
        "{loop} supply {value:+.1f} °C from its limit",
        "Secondary supply within 2 °C of its limit: the plant has lost most of its margin.",
        labels=FACILITY,
    ),
    RuleSpec(
        "loop-flow-collapse",
        "CDU flow collapse",
        "loop",
        "flow_fraction",
        "lt",
        thresholds.FLOW_CRIT_FRACTION,
        0.6,
        30,
        "critical",
        "{loop} flow at {value:.0%} of rated",
        "Flow under 2 % of the loop's rated flow.",
        labels=FACILITY,
    ),
    RuleSpec(
        "loop-flow-low",
        "CDU flow low",
        "loop",
        "flow_fraction",
        "lt",
        thresholds.FLOW_WARN_FRACTION,
        thresholds.FLOW_WARN_FRACTION + 0.05,
        60,
        "warning",
        "{loop} flow at {value:.0%} of rated",
        "Flow under a tenth of the loop's rated flow: barely moving.",
        labels=FACILITY,
    ),
    RuleSpec(
        "loop-flow-stopped",
        "CDU flow stopped",
        "loop",
        "flow_lpm",
        "le",
        thresholds.FLOW_STOPPED_LPM,
        5,
        10,
        "critical",
        "{loop} flow {value:.1f} L/min",
        "Flow stopped dead; also judged on loops without a rated flow.",
        labels=FACILITY,
    ),
    RuleSpec(
        "loop-delta-collapse",
        "CDU ΔT collapse",
        "loop",
        "loop_delta_c",
        "lt",
        1.0,
        2.0,
        300,
        "warning",
        "{loop} ΔT {value:.1f} °C",
        "Return barely warmer than supply: heat is not reaching the loop (bypass, "
        "sensor fault) or the load is gone.",
        labels=FACILITY,
    ),
    RuleSpec(
        "loop-pump-failed",
        "CDU pump failed",
        "loop",
        "pumps_failed",
        "ge",
        thresholds.PUMPS_FAILED_WARN,
        None,
        30,
        "warning",
        "{loop}: {value:.0f} pump(s) failed",
        "A failed pump; an N+1 CDU still holds flow.",
        labels=FACILITY,
    ),
    RuleSpec(
        "loop-no-pump-running",
        "No CDU pump running",
        "loop",
        "pumps_running",
        "lt",
        thresholds.PUMPS_RUNNING_MIN,
        None,
        10,
        "critical",
        "{loop}: no pump running",
        "No pump running: no flow.",
        labels=FACILITY,
    ),
    *(
        RuleSpec(
            f"{scope}-leak{suffix}",
            f"Leak {where}{what}",
            scope,
            "leak",
            "ge",
            state,
            None,
            0,
            severity,
            f"{{{scope}}}: leak detected ({word})",
            f"Leak detection at {word} (Redfish LeakDetection {word.capitalize()}).",
            labels=FACILITY,
        )
        for scope, where in (("loop", "at a CDU"), ("rack", "in a rack"))
        for suffix, what, state, severity, word in (
            ("-warning", " (warning)", thresholds.LEAK_WARN, "warning", "warning"),
            ("", "", thresholds.LEAK_CRIT, "critical", "critical"),
        )
    ),
    RuleSpec(
        "loop-reservoir-low",
        "CDU reservoir low",
        "loop",
        "reservoir_low",
        "ge",
        thresholds.RESERVOIR_LOW_WARN,
        None,
        60,
        "warning",
        "{loop}: reservoir fluid level low",
        "The CDU's reservoir reports a low level: top up before the pumps run dry.",
        labels=FACILITY,
    ),
)

_SILENT = {"node": "{node}", "rack": "{rack}", "loop": "{loop}", "site": "{site}"}
SOURCE_RULES: tuple[RuleSpec, ...] = (
    *(
        RuleSpec(
            f"{scope}-agent-silent",
            f"{scope.capitalize()} agent silent",
            scope,
            "agent_silent_intervals",
            "ge",
            3,
            1,
            0,
            "warning",
            f"{name}: no batch for {{value:.0f}} intervals",
            "No batch for 3 of the source's own batch intervals, as the agent declares"
            " them (a node agent: every second; a facility agent: its poll cadence).",
        )
        for scope, name in _SILENT.items()
    ),
    *(
        RuleSpec(
            f"{scope}-metric-stale",
            f"{scope.capitalize()} metric stopped",
            scope,
            "metric_lag_s",
            "ge",
            120,
            30,
            0,
            "warning",
            f"{name}: {{metric}} has not arrived for {{value:.0f}} s",
            "A field trails the entity's newest sample by 120 s, longer than its source's"
            " own pace allows: it stopped arriving while the agent still reports.",
        )
        for scope, name in {**_SILENT, "gpu": _GPU, "feed": "{rack} feed {feed}"}.items()
    ),
)

# Waste, not a risk to hardware or jobs: info, so it reaches the channels that asked for it
# (a team's route, `owner` set, minimum severity info) and pages nobody. The for-duration is
# the ledger's idle run, so the alert and the ledger call the same minutes idle, and bursty
# inference, idle for seconds between requests, never lasts it.
USAGE_RULES: tuple[RuleSpec, ...] = (
    RuleSpec(
        "gpu-allocated-idle",
        "Allocated GPU idle",
        "gpu",
        "allocated_idle",
        "ge",
        1,
        None,
        LEDGER.idle_minutes * 60,
        "info",
        "{owner}/{workload} holds " + _GPU + " and runs nothing",
        f"An allocation holds the GPU while it is under {LEDGER.idle_util_pct:g} % utilisation"
        f" and near idle power for {LEDGER.idle_minutes} minutes (the energy ledger's"
        " allocated-idle thresholds): reclaim it or ask its owner.",
    ),
)

BUILTIN_RULES: tuple[RuleSpec, ...] = (
    *GPU_RULES,
    *AIR_RULES,
    *POWER_RULES,
    *LOOP_RULES,
    *FORECAST_RULES,
    *FABRIC_RULES,
    *HEALTH_RULES,
    *SOURCE_RULES,
    *USAGE_RULES,
)
