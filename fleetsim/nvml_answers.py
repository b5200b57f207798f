"""What the fake NVML (fleetsim/fake_nvml.py) answers with: handles, the structs NVML
returns, the processes and MIG slots a scenario places, and which measured cost each call
spends (keys of tests/data/nvml/h200/nvml_call_costs.json)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pynvml

POWER_CALLS = frozenset(
    {
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetPowerManagementDefaultLimit",
        "nvmlDeviceGetPowerManagementLimitConstraints",
    }
)
POWER_FIELDS = frozenset(
    {
        pynvml.NVML_FI_DEV_POWER_INSTANT,
        pynvml.NVML_FI_DEV_POWER_AVERAGE,
        pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
        pynvml.NVML_FI_DEV_ENERGY,
    }
)
# Which measured cost each call spends (keys of nvml_call_costs.json).
CALL_COST = {
    "nvmlDeviceGetUtilizationRates": "utilization",
    "nvmlDeviceGetMemoryInfo": "memory_info",
    "nvmlDeviceGetTemperature": "temperature",
    "nvmlDeviceGetPowerUsage": "power_usage",
    "nvmlDeviceGetTotalEnergyConsumption": "total_energy",
    "nvmlDeviceGetClockInfo": "clock_sm",
    "nvmlDeviceGetCurrentClocksEventReasons": "clocks_event_reasons",
    "nvmlDeviceGetPerformanceState": "pstate",
    "nvmlDeviceGetViolationStatus": "violation_power",
    "nvmlDeviceGetTotalEccErrors": "ecc_dbe_volatile",
    "nvmlDeviceGetRemappedRows": "remapped_rows",
    "nvmlDeviceGetPcieThroughput": "pcie_tx",
    "nvmlDeviceGetComputeRunningProcesses": "compute_processes",
    # Not in the capture: a cost table may add them (bench/attribution.py does).
    "nvmlDeviceGetGraphicsRunningProcesses": "graphics_processes",
    "nvmlDeviceGetProcessUtilization": "process_utilization",
}
THROTTLE_FIELDS = frozenset({74, 75, 269, 270, 271})
DEFAULT_COST = (3.0, 2.4)  # µs wall, µs CPU: "most getters take 2–10 µs"


@dataclass(frozen=True, slots=True)
class FakeHandle:
    index: int


@dataclass(frozen=True, slots=True)
class FakeMigHandle:
    parent: int
    slot: int


@dataclass(slots=True)
class Value:
    dVal: float = 0.0
    uiVal: int = 0
    ulVal: int = 0
    ullVal: int = 0
    sllVal: int = 0
    siVal: int = 0
    usVal: int = 0


@dataclass(slots=True)
class FieldAnswer:
    fieldId: int
    nvmlReturn: int
    valueType: int
    value: Value


@dataclass(slots=True)
class Obj:
    """Attribute bag for the structs NVML returns (utilisation, memory, PCI info…)."""

    values: dict[str, Any]

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None


@dataclass(slots=True)
class MigInstance:
    profile: str
    gi: int
    ci: int
    mem_mib: int


@dataclass(slots=True)
class FakeProcess:
    """A process on a GPU (or a MIG slot): host PID, memory held, SM use (0: idle)."""

    pid: int
    used_mib: int
    sm_pct: int = 0
    graphics: bool = False


@dataclass(slots=True)
class CallStats:
    calls: int = 0
    wall_s: float = 0.0
    by_call: dict[str, int] = field(default_factory=dict)
    threads: dict[str, set[str]] = field(default_factory=dict)  # call -> thread names
    field_threads: dict[int, set[str]] = field(default_factory=dict)  # field id -> threads


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


def not_supported_in(value: Any) -> bool:
    return isinstance(value, str) and "NotSupported" in value


# A bare device's facts.
BARE_DEVICE: dict[str, Any] = {
    "name": "NVIDIA H200",
    "uuid": "GPU-00000000-0000-4000-8000-000000000000",
    "serial": "0",
    "memory_info": {"total": 143771 * 1024 * 1024},
    "mig_mode": [0, 0],
    "remapped_rows": [0, 0, 0, 0],
    "supported_event_types": 0,
}
# Every reading of the bare device is 0 (its trace is one idle row that answers any key).
BARE_ROW: dict[str, Any] = defaultdict(float, t=0.0, phase="idle")


def parse_row(row: dict[str, str]) -> dict[str, Any]:
    """One row of nvml_trace.csv: its phase, and every reading as a float (empty: 0)."""
    parsed: dict[str, Any] = {"phase": row["phase"]}
    for key, value in row.items():
        if key == "phase":
            continue
        parsed[key] = float(value) if value else 0.0
    return parsed
