"""The one place the agent calls NVML.

nvitop's rule: an unsupported field is a normal answer, not an exception. Each read below
returns `None` for NotSupported / NoPermission / FunctionNotFound (a driver or binding
mismatch), remembers it so that read is not made again for that device, and the caller
leaves the field out of the sample. A GPU that fell off the bus (`GPU_IS_LOST`) raises
`GpuLost`, which the GPU collector turns into an error record; nothing else escapes.

Every NVML function is called by attribute (`self.lib.nvmlDeviceGetPowerUsage`), one typed
method each, never by a name in a string: a misspelt name would read as "unsupported"
forever. tests/agents/test_nvml_wrapper.py checks each name against `pynvml` and the fake.

`lib` is the `pynvml` module or anything with the same names (the fake in `fake.py`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pynvml

from agents.log import get_logger

log = get_logger("agents.nvml")

T = TypeVar("T")
# pynvml's device handle (a ctypes pointer; `FakeHandle` in tests): opaque to the agent.
DeviceHandle = Any
EventSet = Any

NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
# Answers that mean "this device or driver does not have it": leave the field out, for good.
UNSUPPORTED_CODES = frozenset(
    {
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_NO_PERMISSION,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_NOT_FOUND,
        pynvml.NVML_ERROR_INVALID_ARGUMENT,
    }
)
LOST_CODES = frozenset({pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_ERROR_GPU_NOT_FOUND})
SYSTEM = -1  # the "device index" of system-wide reads, for the unsupported memo

# nvmlValueType_t → the union member that holds it
_VALUE_MEMBER = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}


class GpuLost(Exception):
    """The GPU stopped answering (fell off the bus, XID 79): an error record, not a crash."""

    def __init__(self, index: int, call: str) -> None:
        super().__init__(f"GPU {index} is lost ({call})")
        self.index = index
        self.call = call


class NvmlUnavailable(Exception):
    """No driver, no library: the GPU collector is disabled and says why."""


@dataclass(frozen=True, slots=True)
class Utilization:
    gpu_pct: int
    memory_pct: int


@dataclass(frozen=True, slots=True)
class MemoryInfo:
    used_bytes: int
    total_bytes: int


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process with a context on a GPU: its host PID and the GPU memory it holds (None
    where the driver cannot tell, as under Windows WDDM)."""

    pid: int
    used_bytes: int | None


@dataclass(frozen=True, slots=True)
class NvmlEvent:
    device: DeviceHandle
    event_type: int
    data: int


class Nvml:
    def __init__(self, lib: Any = pynvml) -> None:
        self.lib = lib
        self._unsupported: set[tuple[int, str]] = set()
        self._errors_logged: set[tuple[int, str, int]] = set()

    # -- lifecycle and system ----------------------------------------------------------------

    def init(self) -> None:
        try:
            self.lib.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML did not initialise: {exc}") from None
        except OSError as exc:  # libnvidia-ml.so missing
            raise NvmlUnavailable(f"NVML library not found: {exc}") from None

    def shutdown(self) -> None:
        with contextlib.suppress(pynvml.NVMLError):
            self.lib.nvmlShutdown()

    def device_count(self) -> int:
        return int(self.lib.nvmlDeviceGetCount())

    def handle(self, index: int) -> DeviceHandle:
        """Raises `pynvml.NVMLError` when the device cannot be opened at all."""
        return self.lib.nvmlDeviceGetHandleByIndex(index)

    def driver_version(self) -> str | None:
        value = self._read(SYSTEM, "driver_version", lambda: self.lib.nvmlSystemGetDriverVersion())
        return _text_or_none(value)

    # -- identity ----------------------------------------------------------------------------

    def uuid(self, index: int, handle: DeviceHandle) -> str | None:
        return _text_or_none(self._read(index, "uuid", lambda: self.lib.nvmlDeviceGetUUID(handle)))

    def name(self, index: int, handle: DeviceHandle) -> str | None:
        return _text_or_none(self._read(index, "name", lambda: self.lib.nvmlDeviceGetName(handle)))

    def serial(self, index: int, handle: DeviceHandle) -> str | None:
        value = self._read(index, "serial", lambda: self.lib.nvmlDeviceGetSerial(handle))
        return _text_or_none(value)

    def pci_bus_id(self, index: int, handle: DeviceHandle) -> str | None:
        pci = self._read(index, "pci_info", lambda: self.lib.nvmlDeviceGetPciInfo(handle))
        return None if pci is None else _text(pci.busId)

    # -- the fast tick -----------------------------------------------------------------------

    def utilization(self, index: int, handle: DeviceHandle) -> Utilization | None:
        rates = self._read(
            index, "utilization", lambda: self.lib.nvmlDeviceGetUtilizationRates(handle)
        )
        return None if rates is None else Utilization(int(rates.gpu), int(rates.memory))

    def memory_info(self, index: int, handle: DeviceHandle) -> MemoryInfo | None:
        memory = self._read(index, "memory_info", lambda: self.lib.nvmlDeviceGetMemoryInfo(handle))
        return None if memory is None else MemoryInfo(int(memory.used), int(memory.total))

    def temperature_c(self, index: int, handle: DeviceHandle, sensor: int) -> int | None:
        return self._read_int(
            index,
            f"temperature:{sensor}",
            lambda: self.lib.nvmlDeviceGetTemperature(handle, sensor),
        )

    def margin_temperature_c(self, index: int, handle: DeviceHandle) -> int | None:
        """Degrees below the max-operating temperature (T.Limit)."""
        return self._read_int(
            index, "margin_temperature", lambda: self.lib.nvmlDeviceGetMarginTemperature(handle)
        )

    def power_usage_mw(self, index: int, handle: DeviceHandle) -> int | None:
        return self._read_int(
            index, "power_usage", lambda: self.lib.nvmlDeviceGetPowerUsage(handle)
        )

    def enforced_power_limit_mw(self, index: int, handle: DeviceHandle) -> int | None:
        return self._read_int(
            index,
            "enforced_power_limit",
            lambda: self.lib.nvmlDeviceGetEnforcedPowerLimit(handle),
        )

    def clock_mhz(self, index: int, handle: DeviceHandle, clock_type: int) -> int | None:
        return self._read_int(
            index,
            f"clock:{clock_type}",
            lambda: self.lib.nvmlDeviceGetClockInfo(handle, clock_type),
        )

    def performance_state(self, index: int, handle: DeviceHandle) -> int | None:
        return self._read_int(
            index, "performance_state", lambda: self.lib.nvmlDeviceGetPerformanceState(handle)
        )

    def clock_event_reasons(self, index: int, handle: DeviceHandle) -> int | None:
        """The bitmask of why the clocks are held down (agents/protocol/reasons.py decodes it)."""
        return self._read_int(
            index,
            "clock_event_reasons",
            lambda: self.lib.nvmlDeviceGetCurrentClocksEventReasons(handle),
        )

    def fan_speed_pct(self, index: int, handle: DeviceHandle) -> int | None:
        return self._read_int(index, "fan_speed", lambda: self.lib.nvmlDeviceGetFanSpeed(handle))

    def field_values(
        self, index: int, handle: DeviceHandle, field_ids: Sequence[int], label: str
    ) -> dict[int, float] | None:
        """Several fields in one call; each unsupported field is simply absent from the answer.

        `label` names the bundle for the unsupported memo: one bundle that answers nothing
        here is not asked again, the others are."""
        key = f"fields:{label}"
        answers = self._read(
            index, key, lambda: self.lib.nvmlDeviceGetFieldValues(handle, list(field_ids))
        )
        if answers is None:
            return None
        values: dict[int, float] = {}
        for answer in answers:
            ret = int(answer.nvmlReturn)
            if ret in LOST_CODES:
                raise GpuLost(index, key)
            if ret != 0:
                continue
            member = _VALUE_MEMBER.get(int(answer.valueType))
            if member is not None:
                values[int(answer.fieldId)] = getattr(answer.value, member)
        if not values:
            self._unsupported.add((index, key))  # nothing in this bundle exists here: stop asking
            return None
        return values

    def field_answers(
        self, index: int, handle: DeviceHandle, field_ids: Sequence[int]
    ) -> dict[int, float | None]:
        """Several fields in one call, where "this GPU does not have it" is an answer: a
        field NVML calls unsupported maps to None; one that failed otherwise (or a call that
        failed as a whole) is absent, to be asked again. Nothing is remembered: for facts
        read rarely, whose "not supported" is itself reported."""
        try:
            answers = self.lib.nvmlDeviceGetFieldValues(handle, list(field_ids))
        except pynvml.NVMLError as exc:
            code = int(getattr(exc, "value", -1))
            if code in LOST_CODES:
                raise GpuLost(index, "fields:answers") from None
            if code in UNSUPPORTED_CODES:
                return dict.fromkeys(field_ids)
            self._failed(index, "fields:answers", exc)
            return {}
        except AttributeError:
            return dict.fromkeys(field_ids)
        values: dict[int, float | None] = {}
        for answer in answers:
            ret = int(answer.nvmlReturn)
            if ret in LOST_CODES:
                raise GpuLost(index, "fields:answers")
            if ret in UNSUPPORTED_CODES:
                values[int(answer.fieldId)] = None
                continue
            member = _VALUE_MEMBER.get(int(answer.valueType))
            if ret == 0 and member is not None:
                values[int(answer.fieldId)] = getattr(answer.value, member)
        return values

    # -- the slow lane -----------------------------------------------------------------------

    def total_energy_mj(self, index: int, handle: DeviceHandle) -> int | None:
        """Millijoules since the driver loaded; ~3.2 ms of CPU a call on the H200."""
        return self._read_int(
            index, "total_energy", lambda: self.lib.nvmlDeviceGetTotalEnergyConsumption(handle)
        )

    def pcie_throughput_kib_s(self, index: int, handle: DeviceHandle, counter: int) -> int | None:
        """NVML samples for 20 ms, asleep: ~21 ms a call."""
        return self._read_int(
            index,
            f"pcie_throughput:{counter}",
            lambda: self.lib.nvmlDeviceGetPcieThroughput(handle, counter),
        )

    def nvlink_is_up(self, index: int, handle: DeviceHandle, link: int) -> bool | None:
        """None when this GPU has no link `link`. Not remembered: link N may exist, N+1 not."""
        state = self._probe(
            index, "nvlink_state", lambda: self.lib.nvmlDeviceGetNvLinkState(handle, link)
        )
        return None if state is None else int(state) == pynvml.NVML_FEATURE_ENABLED

    # -- who runs here (the workloads collector, on the slow lane) ----------------------------

    def running_processes(
        self, index: int, handle: DeviceHandle, where: str = ""
    ) -> list[GpuProcess] | None:
        """Compute and graphics contexts, one entry per PID (a process with both holds one
        pool of memory: the larger figure). `handle` may be a MIG device's, `where` names it
        for the unsupported memo. Host PIDs: the driver ignores PID namespaces. None when
        neither list is supported (on a MIG parent, without privileges)."""
        compute = self._read(
            index,
            f"compute_processes{where}",
            lambda: self.lib.nvmlDeviceGetComputeRunningProcesses(handle),
        )
        graphics = self._read(
            index,
            f"graphics_processes{where}",
            lambda: self.lib.nvmlDeviceGetGraphicsRunningProcesses(handle),
        )
        if compute is None and graphics is None:
            return None
        used: dict[int, int | None] = {}
        for info in [*(compute or ()), *(graphics or ())]:
            pid, memory = int(info.pid), info.usedGpuMemory
            before = used.get(pid)
            used[pid] = memory if before is None else max(before, memory or 0)
        return [GpuProcess(pid, None if m is None else int(m)) for pid, m in used.items()]

    def process_sm_utilization(
        self, index: int, handle: DeviceHandle, since_us: int
    ) -> list[tuple[int, int, int]] | None:
        """(pid, timestamp µs, SM %) samples newer than `since_us` (CPU time in µs; 0: all the
        driver holds). Only processes with non-zero use in a sample period appear, so an empty
        list means idle: NVML's NOT_FOUND ("nothing newer") is that, not a failure. None when
        unsupported (every MIG device: nvml.h)."""
        key = "process_utilization"
        if (index, key) in self._unsupported:
            return None
        try:
            samples = self.lib.nvmlDeviceGetProcessUtilization(handle, since_us)
        except pynvml.NVMLError as exc:
            # pynvml raises even for SUCCESS when the size probe finds no samples at all.
            if int(getattr(exc, "value", -1)) in (pynvml.NVML_SUCCESS, pynvml.NVML_ERROR_NOT_FOUND):
                return []
            self._failed(index, key, exc)
            return None
        except AttributeError:
            self._unsupported.add((index, key))
            return None
        return [(int(s.pid), int(s.timeStamp), int(s.smUtil)) for s in samples]

    def minor_number(self, index: int, handle: DeviceHandle) -> int | None:
        """N of `/dev/nvidiaN`: how Slurm's GRES indexes map to NVML's (doc/html/gres.shtml)."""
        return self._read_int(
            index, "minor_number", lambda: self.lib.nvmlDeviceGetMinorNumber(handle)
        )

    # -- limits, read once -------------------------------------------------------------------

    def temperature_threshold_c(self, index: int, handle: DeviceHandle, kind: int) -> int | None:
        return self._read_int(
            index,
            f"temperature_threshold:{kind}",
            lambda: self.lib.nvmlDeviceGetTemperatureThreshold(handle, kind),
        )

    def default_power_limit_mw(self, index: int, handle: DeviceHandle) -> int | None:
        return self._read_int(
            index,
            "default_power_limit",
            lambda: self.lib.nvmlDeviceGetPowerManagementDefaultLimit(handle),
        )

    def power_limit_constraints_mw(
        self, index: int, handle: DeviceHandle
    ) -> tuple[int, int] | None:
        """(minimum, maximum) settable power limit."""
        constraints = self._read(
            index,
            "power_limit_constraints",
            lambda: self.lib.nvmlDeviceGetPowerManagementLimitConstraints(handle),
        )
        return None if constraints is None else (int(constraints[0]), int(constraints[1]))

    # -- MIG ---------------------------------------------------------------------------------

    def mig_enabled(self, index: int, handle: DeviceHandle) -> bool | None:
        """Whether MIG is on now (the pending mode after a reset does not count)."""
        mode = self._read(index, "mig_mode", lambda: self.lib.nvmlDeviceGetMigMode(handle))
        return None if mode is None else int(mode[0]) == pynvml.NVML_DEVICE_MIG_ENABLE

    def max_mig_device_count(self, index: int, handle: DeviceHandle) -> int | None:
        return self._read_int(
            index, "max_mig_devices", lambda: self.lib.nvmlDeviceGetMaxMigDeviceCount(handle)
        )

    def mig_device_handle(self, index: int, handle: DeviceHandle, slot: int) -> DeviceHandle | None:
        """The MIG device in `slot`, or None: an empty slot answers NotFound, the next may not."""
        return self._probe(
            index,
            "mig_device_handle",
            lambda: self.lib.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot),
        )

    def gpu_instance_id(self, index: int, mig_handle: DeviceHandle) -> int | None:
        return self._read_int(
            index, "gpu_instance_id", lambda: self.lib.nvmlDeviceGetGpuInstanceId(mig_handle)
        )

    def compute_instance_id(self, index: int, mig_handle: DeviceHandle) -> int | None:
        return self._read_int(
            index,
            "compute_instance_id",
            lambda: self.lib.nvmlDeviceGetComputeInstanceId(mig_handle),
        )

    # -- events (XID, ECC): used by the event thread -----------------------------------------

    def supported_event_types(self, index: int, handle: DeviceHandle) -> int | None:
        return self._read_int(
            index,
            "supported_event_types",
            lambda: self.lib.nvmlDeviceGetSupportedEventTypes(handle),
        )

    def create_event_set(self) -> EventSet | None:
        """None when this driver or binding offers no event sets."""
        try:
            return self.lib.nvmlEventSetCreate()
        except (pynvml.NVMLError, AttributeError):
            return None

    def register_events(self, handle: DeviceHandle, mask: int, event_set: EventSet) -> None:
        """Raises `pynvml.NVMLError` when this device will not report these events."""
        self.lib.nvmlDeviceRegisterEvents(handle, mask, event_set)

    def wait_for_event(self, event_set: EventSet, timeout_ms: int) -> NvmlEvent | None:
        """Blocks up to `timeout_ms`; None when nothing happened. Other failures raise
        `pynvml.NVMLError`."""
        try:
            data = self.lib.nvmlEventSetWait_v2(event_set, timeout_ms)
        except pynvml.NVMLError as exc:
            if getattr(exc, "value", None) == pynvml.NVML_ERROR_TIMEOUT:
                return None
            raise
        return NvmlEvent(data.device, int(data.eventType), int(data.eventData))

    def free_event_set(self, event_set: EventSet) -> None:
        with contextlib.suppress(pynvml.NVMLError):
            self.lib.nvmlEventSetFree(event_set)

    # -- how a read fails --------------------------------------------------------------------

    def _read(self, index: int, key: str, call: Callable[[], T]) -> T | None:
        """`call()`, or None if the device does not support it (remembered under `key`, so
        it is not asked again). Raises GpuLost."""
        if (index, key) in self._unsupported:
            return None
        try:
            return call()
        except pynvml.NVMLError as exc:
            self._failed(index, key, exc)
            return None
        except AttributeError as exc:  # the installed pynvml predates this function
            self._unsupported.add((index, key))
            log.warning("NVML binding lacks a function", gpu=index, call=key, error=str(exc))
            return None

    def _read_int(self, index: int, key: str, call: Callable[[], Any]) -> int | None:
        value = self._read(index, key, call)
        return None if value is None else int(value)

    def _probe(self, index: int, key: str, call: Callable[[], T]) -> T | None:
        """Like `_read`, but an unsupported answer is not remembered: for reads whose answer
        depends on the argument (NVLink link N exists, link N+1 does not)."""
        try:
            return call()
        except pynvml.NVMLError as exc:
            if int(getattr(exc, "value", -1)) in LOST_CODES:
                raise GpuLost(index, key) from None
            return None
        except AttributeError:
            return None

    def _failed(self, index: int, key: str, exc: Any) -> None:
        code = int(getattr(exc, "value", -1))
        if code in LOST_CODES:
            raise GpuLost(index, key)
        if code in UNSUPPORTED_CODES:
            self._unsupported.add((index, key))
            return
        # Anything else (timeout, unknown) may pass: report it once per kind, try again later.
        if (index, key, code) not in self._errors_logged:
            self._errors_logged.add((index, key, code))
            log.warning("NVML call failed", gpu=index, call=key, error=str(exc))


def _text_or_none(value: Any) -> str | None:
    return None if value is None else _text(value)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
