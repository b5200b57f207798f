"""dcgm-exporter fields → Fleetwatch GPU metrics (agents/protocol/metrics.py), with units.

Only fields with a Fleetwatch metric of the same meaning are mapped; the rest (encoder
and decoder utilisation, sync-boost, board-limit, low-utilisation and reliability
violation time, aggregate ECC, retired pages, NVLink bandwidth and flit CRC, vGPU
licence) have no column and are not queried. `DCGM_FI_DEV_XID_ERRORS` is not a sample:
it becomes an XID event when it changes (fleet/ingest/prometheus/pull.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agents.protocol.metrics import GPU_METRICS

XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"

# DCGM's "no data" values (dcgm_structs.h): int32 blanks start at 0x7ffffff0, int64
# blanks at 0x7ffffffffffffff0 (9.22e18), the fp64 blank is 2**47.
INT32_BLANK = 2147483632.0
INT64_BLANK = 9.2e18
FP64_BLANK = 140737488355328.0


@dataclass(frozen=True, slots=True)
class FieldMap:
    field: str  # the DCGM field, which dcgm-exporter uses as the metric name
    metric: str  # the Fleetwatch GPU metric
    scale: float  # Fleetwatch value = DCGM value × scale
    unit: str  # the DCGM unit, for the docs


FIELDS: tuple[FieldMap, ...] = (
    FieldMap("DCGM_FI_DEV_SM_CLOCK", "clock_sm_mhz", 1, "MHz"),
    FieldMap("DCGM_FI_DEV_MEM_CLOCK", "clock_mem_mhz", 1, "MHz"),
    FieldMap("DCGM_FI_DEV_GPU_TEMP", "temp_gpu_c", 1, "°C"),
    FieldMap("DCGM_FI_DEV_MEMORY_TEMP", "temp_mem_c", 1, "°C"),
    FieldMap("DCGM_FI_DEV_POWER_USAGE", "power_w", 1, "W"),
    FieldMap("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "energy_j", 1e-3, "mJ"),
    # NVML's PCIe throughput (KB/s over a 20 ms window), whatever the CSV's "counter" says.
    FieldMap("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "pcie_tx_kib_s", 1, "KB/s"),
    FieldMap("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "pcie_rx_kib_s", 1, "KB/s"),
    FieldMap("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "pcie_replay_total", 1, "count"),
    FieldMap("DCGM_FI_DEV_GPU_UTIL", "util_gpu_pct", 1, "%"),
    FieldMap("DCGM_FI_DEV_MEM_COPY_UTIL", "util_mem_pct", 1, "%"),
    FieldMap("DCGM_FI_DEV_FB_USED", "mem_used_mib", 1, "MiB"),
    FieldMap("DCGM_FI_DEV_FB_TOTAL", "mem_total_mib", 1, "MiB"),
    FieldMap("DCGM_FI_DEV_POWER_VIOLATION", "violation_power_ns", 1e3, "µs"),
    FieldMap("DCGM_FI_DEV_THERMAL_VIOLATION", "violation_thermal_ns", 1e3, "µs"),
    FieldMap("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "ecc_sbe_vol_total", 1, "count"),
    FieldMap("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "ecc_dbe_vol_total", 1, "count"),
    # The agent counts data CRC errors only (NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL).
    FieldMap(
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "nvlink_crc_errors_total", 1, "count"
    ),
    FieldMap("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "nvlink_replay_total", 1, "count"),
    FieldMap("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "nvlink_recovery_total", 1, "count"),
    FieldMap("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "remapped_rows_correctable", 1, "rows"),
    FieldMap("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "remapped_rows_uncorrectable", 1, "rows"),
    FieldMap("DCGM_FI_DEV_ROW_REMAP_FAILURE", "remap_failure", 1, "0/1"),
    FieldMap("DCGM_FI_DEV_ROW_REMAP_PENDING", "remap_pending", 1, "0/1"),
    # Not in the default list; exported when an operator adds them to the counters file.
    FieldMap("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "clock_event_reasons", 1, "bitmask"),
    FieldMap("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "clock_event_reasons", 1, "bitmask"),
    FieldMap("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "power_limit_w", 1, "W"),
    FieldMap("DCGM_FI_DEV_FAN_SPEED", "fan_pct", 1, "%"),
)

BY_FIELD: dict[str, FieldMap] = {f.field: f for f in FIELDS}
PULLED_FIELDS: tuple[str, ...] = (*BY_FIELD, XID_FIELD)

_BOUNDS = {m.name: (m.lo, m.hi, m.integer) for m in GPU_METRICS}


def is_blank(value: float) -> bool:
    """A DCGM sentinel (or a value no reading can be): never stored."""
    if not math.isfinite(value):
        return True
    magnitude = abs(value)
    if magnitude == FP64_BLANK or magnitude >= INT64_BLANK:
        return True
    return INT32_BLANK <= magnitude <= 2147483647.0


def convert(field: str, value: float) -> tuple[str, float] | None:
    """The Fleetwatch (metric, value) for one DCGM reading, or None: unmapped, a blank, or
    outside the metric's plausible range (the bound the agent protocol enforces)."""
    spec = BY_FIELD.get(field)
    if spec is None or is_blank(value):
        return None
    converted = value * spec.scale
    lo, hi, integer = _BOUNDS[spec.metric]
    if not lo <= converted <= hi:
        return None
    if integer:
        return spec.metric, int(converted)
    return spec.metric, converted


def metric_regex() -> str:
    """The PromQL `__name__` regex selecting every pulled field (and nothing else)."""
    return "|".join(PULLED_FIELDS)
