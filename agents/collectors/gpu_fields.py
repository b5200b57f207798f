"""Which NVML reads fill which protocol fields, and how often (the tiers).

Costs measured on the H200 (tests/data/nvml/h200/nvml_call_costs.json, medians):
most getters 2–10 µs and the bundle of cheap field values ~9 µs → every tick;
throttle/violation-time fields ~0.56 ms of CPU → every `throttle_every` ticks;
total energy ~3.2 ms of CPU → every `energy_every` ticks;
PCIe replay field ~0.13 ms → every `pcie_every` ticks, with NVLink state and error counters;
PCIe throughput ~21 ms a call (it samples for 20 ms, asleep) → every `pcie_throughput_every`.
"""

from __future__ import annotations

import pynvml

MIB = 1024 * 1024

# One nvmlDeviceGetFieldValues call per tick for the cheap fields:
# field id -> (protocol field, scale applied to the raw value)
FAST_FIELDS: dict[int, tuple[str, float]] = {
    pynvml.NVML_FI_DEV_MEMORY_TEMP: ("temp_mem_c", 1.0),
    pynvml.NVML_FI_DEV_POWER_INSTANT: ("power_instant_w", 0.001),  # mW
    pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: ("ecc_sbe_vol_total", 1.0),
    pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: ("ecc_dbe_vol_total", 1.0),
    pynvml.NVML_FI_DEV_REMAPPED_COR: ("remapped_rows_correctable", 1.0),
    pynvml.NVML_FI_DEV_REMAPPED_UNC: ("remapped_rows_uncorrectable", 1.0),
    pynvml.NVML_FI_DEV_REMAPPED_PENDING: ("remap_pending", 1.0),
    pynvml.NVML_FI_DEV_REMAPPED_FAILURE: ("remap_failure", 1.0),
}

# Facts that change a few times in a GPU's life, read on the slow lane into gpu_info
# (agents/protocol/memory.py): field id -> key of `memory_errors`. ~8 µs a call on the H200.
MEMORY_ERROR_FIELDS: dict[int, str] = {
    pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL: "ecc_sbe_agg_total",
    pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: "ecc_dbe_agg_total",
    pynvml.NVML_FI_DEV_RETIRED_SBE: "retired_pages_sbe",
    pynvml.NVML_FI_DEV_RETIRED_DBE: "retired_pages_dbe",
    pynvml.NVML_FI_DEV_RETIRED_PENDING: "retired_pages_pending",
}

# Violation / throttle time, ns since the driver loaded. Field 74 is both
# NVML_FI_DEV_PERF_POLICY_POWER and NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP.
THROTTLE_FIELDS: dict[int, tuple[str, float]] = {
    pynvml.NVML_FI_DEV_PERF_POLICY_POWER: ("violation_power_ns", 1.0),
    pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL: ("violation_thermal_ns", 1.0),
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN: ("slowdown_sw_thermal_ns", 1.0),
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN: ("slowdown_hw_thermal_ns", 1.0),
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN: (
        "slowdown_hw_power_brake_ns",
        1.0,
    ),
}

PCIE_REPLAY_FIELDS: dict[int, tuple[str, float]] = {
    pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER: ("pcie_replay_total", 1.0),
}

NVLINK_ERROR_FIELDS: dict[int, tuple[str, float]] = {
    pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: ("nvlink_crc_errors_total", 1.0),
    pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: ("nvlink_replay_total", 1.0),
    pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: ("nvlink_recovery_total", 1.0),
}

# Device limits as "T.Limit" headroom: offsets from the max-operating temperature.
TLIMIT_FIELDS: dict[int, tuple[str, float]] = {
    pynvml.NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT: ("tlimit_slowdown_c", 1.0),
    pynvml.NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT: ("tlimit_shutdown_c", 1.0),
    pynvml.NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT: ("tlimit_gpu_max_c", 1.0),
    pynvml.NVML_FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT: ("tlimit_mem_max_c", 1.0),
}

TEMPERATURE_THRESHOLDS: dict[str, int] = {
    "slowdown_c": pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
    "shutdown_c": pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
    "gpu_max_c": pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX,
    "mem_max_c": pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX,
}

PSTATE_UNKNOWN = 32
NVLINK_MAX_LINKS = int(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18))


def scaled(
    values: dict[int, float] | None, table: dict[int, tuple[str, float]]
) -> dict[str, float]:
    """Protocol fields from a field-values answer; fields it did not answer stay out."""
    if not values:
        return {}
    out: dict[str, float] = {}
    for field_id, (name, scale) in table.items():
        raw = values.get(field_id)
        if raw is not None:
            value = raw * scale
            out[name] = (
                int(value) if scale == 1.0 and float(value).is_integer() else round(value, 3)
            )
    return out
