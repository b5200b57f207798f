"""Every threshold behind Fleetwatch's levels, with where it comes from."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from agents.protocol import reasons as nvml

# Seconds after which a sample no longer describes the present (dashboard/overview.py).
STALE_AFTER_S = 30.0

# Each constant below is read by the page level (fleet/health) AND by the built-in alert
# rule at that boundary (fleet/alerts/rulepack.py), with the same comparison: the boundary
# value itself is on the side each comment names (tests/alerts/test_page_rule_boundaries.py
# runs one table of cases through both).

# GPU headroom to its own slowdown limit (and HBM to its max operating temperature), °C:
# at or below warn / crit. The limit is the device's own (NVML slowdown threshold, or the
# T.Limit form on newer drivers), not a fleet-wide temperature such as the community's
# 85/90 °C rules. "Within 10 °C" includes 10 °C: the page always read it so.
HEADROOM_WARN_C = 10.0
HEADROOM_CRIT_C = 3.0

# Rack power as a share of its inventory budget, at or above warn / crit (budget = what
# the rack's primary feeds may carry, docs/inventory.md).
RACK_POWER_WARN_FRACTION = 0.90
RACK_POWER_CRIT_FRACTION = 1.00

# Inlet air, °C, above (not at) warn / crit: ASHRAE TC 9.9's recommended range tops out at
# 27 °C for every class and the A1 allowable range at 32 °C, both inclusive (ASHRAE TC 9.9,
# "Thermal Guidelines for Data Processing Environments").
INLET_RECOMMENDED_MAX_C = 27.0
INLET_ALLOWABLE_A1_MAX_C = 32.0

# Liquid loops. The supply limit is the ASHRAE W-class number (W17/W27/W32/W40/W45 = max
# supply °C; fleet.choices.LiquidClassChoices) or the loop's own `supply_limit_c`. Above it
# is crit; above limit − margin warn (Fleetwatch's choice: the simulator's CDU
# setpoint sits 4 °C below the limit, so 2 °C means the plant has lost half its margin).
SUPPLY_WARN_MARGIN_C = 2.0
# Flow against the loop's rated flow (Redfish CoolantConnector RatedFlowLitersPerMinute).
# The rating is the CDU's maximum; variable-speed pumps run well below it at partial heat
# load (the demo's CDUs sit at 30–70 %), so a page level only flags a loop that is barely
# moving: under a tenth of rated warn, under 2 % crit (Fleetwatch's choice). A drop against
# the loop's own recent flow ("flow collapse") is an alert rule with a for-duration
# (docs/rules.md). Without a rating, only a flow stopped dead (≤ 1 L/min) is judged.
# Fractions: below (not at) warn / crit; stopped: at or below.
FLOW_WARN_FRACTION = 0.10
FLOW_CRIT_FRACTION = 0.02
FLOW_STOPPED_LPM = 1.0
# `leak`: 0 ok, 1 warning, 2 critical (metrics.py; Redfish LeakDetection OK/Warning/Critical).
LEAK_WARN = 1
LEAK_CRIT = 2
# Pumps and reservoir (Redfish CDU Pumps, Reservoirs): a failed pump (at or above) warns,
# an N+1 CDU still holds flow; fewer than one running (none) is crit; a low reservoir warns.
PUMPS_FAILED_WARN = 1
PUMPS_RUNNING_MIN = 1
RESERVOIR_LOW_WARN = 1

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
# is an alert rule with a for-duration (docs/rules.md). Each crit bit has a critical rule:
# gpu-hw-thermal-slowdown, gpu-sw-thermal-slowdown, gpu-hw-power-brake, and gpu-hw-slowdown
# for HW slowdown without either hardware cause (fleet/alerts/rulepack.py).
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
