"""The site's plant in the simulator (fleetsim/fleet.py runs it): water, air and the
cooling plant's figures, the model's calibration and assumptions, and the hosts' heat
capture and the outdoor day they depend on."""

from __future__ import annotations

import math

WATER_CP_KJ_PER_KG_K = 4.186
DESIGN_RISE_K = 10.0
HALL_AIR_C = 24.0
RACK_OVERHEAD_W = 1_500.0
BOIL_CLAMP_C = 95.0
# Water in a rack's cold plates, manifolds and hoses: the circuit is sized for the rack's
# budget. 25 kg for a 130 kW rack (the model's calibration), at least 5 kg.
RACK_WATER_KG_PER_KW = 25.0 / 130.0
RACK_WATER_MIN_KG = 5.0
# The host's cold-plated parts (CPUs, NVSwitches, memory) give the water all their heat up
# to HOST_FULL_CAPTURE_C and none once it reaches HOST_PARTS_LIMIT_C: their own limits
# (DDR5's 85 °C case limit, CPUs some 15 K under a ~100 °C junction limit) leave no
# gradient; their heat then leaves with the servers' fans. A model assumption.
HOST_PARTS_LIMIT_C = 85.0
HOST_FULL_CAPTURE_C = 70.0
# A GPU that tripped is reset (as an operator or a node-health daemon would) once it has
# been off the bus this long and its die is back under its max-operating temperature.
THERMAL_RESET_AFTER_S = 300.0
# Share of a rack's heat each cooling type puts into the liquid loop (a direct-liquid rack
# of servers that say their own share, GB200 NVL72 trays, puts theirs: `liquid_share`).
LIQUID_SHARE = {"air": 0.0, "rear_door": 1.0, "direct_liquid": 0.8, "immersion": 1.0}
# Cooling plant power per watt of IT, at 15 °C outside (air needs chillers and CRAH fans).
COOLING_PER_W = {"air": 0.30, "rear_door": 0.18, "direct_liquid": 0.08, "immersion": 0.05}


def host_capture(water_c: float) -> float:
    """Share of the hosts' liquid-side heat their parts can still give water at `water_c`."""
    span = HOST_PARTS_LIMIT_C - HOST_FULL_CAPTURE_C
    return min(1.0, max(0.0, (HOST_PARTS_LIMIT_C - water_c) / span))


def outdoor_c(wall: float) -> float:
    """A mild day: 15 °C mean, warmest mid-afternoon UTC."""
    hour = (wall % 86400) / 3600.0
    return 15.0 + 7.0 * math.sin(2 * math.pi * (hour - 9.0) / 24.0)
