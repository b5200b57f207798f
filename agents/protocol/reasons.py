"""NVML clock-event ("throttle") reasons: the bitmask and its decoding.

Values from nvml.h (NVML API 13, `nvmlClocksEventReason*`; the old
`nvmlClocksThrottleReason*` names are aliases). More than one bit can be set.
"""

from __future__ import annotations

GPU_IDLE = 0x1
APPLICATIONS_CLOCKS_SETTING = 0x2
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SYNC_BOOST = 0x10
SW_THERMAL_SLOWDOWN = 0x20
HW_THERMAL_SLOWDOWN = 0x40
HW_POWER_BRAKE_SLOWDOWN = 0x80
DISPLAY_CLOCK_SETTING = 0x100

# Name and meaning of each bit, in bit order. Names follow dcgm-exporter's
# `clock_event` label values so the two read the same in a shared Grafana.
REASONS: tuple[tuple[int, str, str], ...] = (
    (GPU_IDLE, "gpu_idle", "nothing is running"),
    (APPLICATIONS_CLOCKS_SETTING, "clocks_setting", "held by the applications-clocks setting"),
    (SW_POWER_CAP, "power_cap", "clocks reduced to stay under the power limit"),
    (HW_SLOWDOWN, "hw_slowdown", "hardware slowdown (>=2x): heat, power brake or over-power"),
    (SYNC_BOOST, "sync_boost", "held down by its sync-boost group"),
    (SW_THERMAL_SLOWDOWN, "sw_thermal", "keeping GPU/memory below max operating temperature"),
    (HW_THERMAL_SLOWDOWN, "hw_thermal", "hardware thermal slowdown (>=2x)"),
    (HW_POWER_BRAKE_SLOWDOWN, "hw_power_brake", "external power-brake assertion (e.g. PSU)"),
    (DISPLAY_CLOCK_SETTING, "display_clocks", "display clock setting"),
)

# Bits that mean the GPU is being slowed by heat or power delivery, as opposed
# to idling or obeying a configured cap. Alert rules and the UI treat these as bad.
HARMFUL = HW_SLOWDOWN | SW_THERMAL_SLOWDOWN | HW_THERMAL_SLOWDOWN | HW_POWER_BRAKE_SLOWDOWN


def decode(mask: int) -> list[str]:
    """Named reasons set in `mask`, in bit order; unknown bits as `bit_0x...`."""
    names = [name for bit, name, _ in REASONS if mask & bit]
    known = 0
    for bit, _, _ in REASONS:
        known |= bit
    extra = mask & ~known
    bit = 1
    while extra:
        if extra & bit:
            names.append(f"bit_{bit:#x}")
            extra &= ~bit
        bit <<= 1
    return names
