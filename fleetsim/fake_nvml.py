"""A fake NVML that answers from a real capture (tests/data/nvml/h200/).

It offers the `pynvml` names the agent uses and raises the real `pynvml.NVMLError`
subclasses, so `Nvml` cannot tell it from the driver. What it answers:

- static facts, limits, "T.Limit" offsets and every NotSupported answer from
  `nvml_inventory.json`;
- changing values (utilisation, temperatures, power, clocks, reason bits, energy,
  violation time) from `nvml_trace.csv`, replayed on its own clock and looped;
- when `spend_costs` is set, each call costs what it cost on the H200
  (`nvml_call_costs.json`): CPU burnt for the measured CPU time, then a wait for the rest of
  the wall time. That is what makes the benchmark honest about the slow calls.

Scenario knobs for tests: several GPUs, a GPU whose power readings are NotSupported, a GPU
that falls off the bus at a given trace time, MIG instances, injected XID events, processes
on a GPU or a MIG slot (`FakeProcess`: PID, memory, SM use), the GPUs' own UUIDs, a GPU's
memory-error fields (`memory_errors`: aggregate ECC, retired pages, or NotSupported), a GPU
reset (`reset_gpu`: its energy counter starts again) and the driver's version (`driver`).
The energy counter rises on across the trace's loops, as a real one does.

Without a capture (`capture_dir=None`) it is a bare, idle device that answers the process
and MIG calls: what the simulator's workloads need on each virtual node
(fleetsim/workloads.py), from an install that has no tests/data.
"""

from __future__ import annotations

import csv
import json
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pynvml

from fleetsim.nvml_answers import (
    BARE_DEVICE,
    BARE_ROW,
    CALL_COST,
    DEFAULT_COST,
    POWER_CALLS,
    POWER_FIELDS,
    THROTTLE_FIELDS,
    CallStats,
    FakeHandle,
    FakeMigHandle,
    FakeProcess,
    FieldAnswer,
    MigInstance,
    Obj,
    Value,
    not_supported_in,
    nvml_error,
    parse_row,
)


class FakeNvml:
    def __init__(
        self,
        capture_dir: Path | None,
        gpus: int = 1,
        clock: Callable[[], float] | None = None,
        spend_costs: bool = False,
        no_power: Iterable[int] = (),
        lost_at: dict[int, float] | None = None,
        mig: dict[int, list[MigInstance]] | None = None,
        nvlinks: int = 0,
        processes: dict[int | tuple[int, int], list[FakeProcess]] | None = None,
        uuids: Sequence[str] = (),
    ) -> None:
        self.capture_dir = capture_dir
        self.device: dict[str, Any] = dict(BARE_DEVICE)
        self.driver = "580.159.04"
        self.idle_fields: dict[str, Any] = {}
        self.trace: list[dict[str, Any]] = [BARE_ROW]
        self.costs: dict[str, dict[str, Any]] = {"idle": {}, "under_load": {}}
        if capture_dir is not None:
            inventory = json.loads((capture_dir / "nvml_inventory.json").read_text())
            self.device = inventory["devices"][0]
            self.driver = inventory["driver"]
            self.idle_fields = inventory["field_values_idle"]
            with (capture_dir / "nvml_trace.csv").open() as handle:
                self.trace = [parse_row(row) for row in csv.DictReader(handle)]
            costs = json.loads((capture_dir / "nvml_call_costs.json").read_text())["costs"]
            self.costs = costs
        self._field_names = {
            getattr(pynvml, name): name for name in self.idle_fields if hasattr(pynvml, name)
        }
        self.trace_span_s = self.trace[-1]["t"] + 0.25
        # GPU index -> UUID where the caller names them (the simulator: its gpu_info UUIDs)
        self.uuids = list(uuids)
        self.gpus = gpus
        started = time.monotonic()
        self.clock = clock or (lambda: time.monotonic() - started)
        self.spend_costs = spend_costs
        self.no_power = frozenset(no_power)
        self.lost_at = dict(lost_at or {})
        self.mig = dict(mig or {})
        # The captured VM had no NVLink peers (NotSupported); an HGX board has 18 links.
        self.nvlinks = nvlinks
        self.nvlink_errors = {"crc": 0, "replay": 0, "recovery": 0}
        # GPU index, or (GPU index, MIG slot) -> its processes; tests change it between reads.
        self.processes = dict(processes or {})
        # GPU index -> {NVML field id: count, None for NotSupported, or "ret=N" for NVML's
        # error N}: a GPU's memory-error facts (aggregate ECC, retired pages) where a test
        # sets them; else the capture's.
        self.memory_errors: dict[int, dict[int, int | str | None]] = {}
        # GPU index -> the energy (mJ) its counter started again from: `reset_gpu`.
        self._energy_zero: dict[int, int] = {}
        # call name -> hook run before answering (tests use it to hold a call open)
        self.before: dict[str, Callable[[], None]] = {}
        self.stats = CallStats()
        self._events: queue.Queue[tuple[int, int, int]] = queue.Queue()
        self._stats_lock = threading.Lock()
        self.initialised = False

    # -- scenario controls -----------------------------------------------------------------

    def inject_xid(self, index: int, code: int) -> None:
        self._events.put((index, pynvml.nvmlEventTypeXidCriticalError, code))

    def inject_event(self, index: int, event_type: int, data: int = 0) -> None:
        self._events.put((index, event_type, data))

    def reset_gpu(self, index: int) -> None:
        """A GPU reset (or, for every GPU, a driver reload): its energy counter starts
        again from zero, as the driver's does."""
        self._energy_zero[index] = self._energy_total_mj()

    def energy_mj(self, index: int) -> int:
        """The GPU's energy counter: the trace's, rising on across its loops (a replayed
        trace must not read as a restarted counter), less where it was last reset."""
        return self._energy_total_mj() - self._energy_zero.get(index, 0)

    def _energy_total_mj(self) -> int:
        first, last = self.trace[0]["energy_j"], self.trace[-1]["energy_j"]
        loops = int(self.clock() // self.trace_span_s)
        return int((self.now_row()["energy_j"] + loops * (last - first)) * 1000)

    def now_row(self) -> dict[str, Any]:
        t = self.clock() % self.trace_span_s
        position = min(len(self.trace) - 1, int(t / 0.25))
        return self.trace[position]

    # -- the pynvml surface ------------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("nvml"):
            raise AttributeError(name)
        impl = getattr(type(self), "_" + name, None)
        if impl is None:
            raise AttributeError(name)  # the wrapper treats this as FunctionNotFound

        def call(*args: Any) -> Any:
            started = time.perf_counter()
            try:
                self._check(name, args)
                hook = self.before.get(name)
                if hook is not None:
                    hook()
                result = impl(self, *args)
                return result
            finally:
                if self.spend_costs:
                    self._spend(name, args)
                # An event wait blocks by design (on its own thread): not a call cost.
                elapsed = 0.0 if name == "nvmlEventSetWait_v2" else time.perf_counter() - started
                with self._stats_lock:
                    self.stats.calls += 1
                    self.stats.wall_s += elapsed
                    self.stats.by_call[name] = self.stats.by_call.get(name, 0) + 1
                    thread = threading.current_thread().name
                    self.stats.threads.setdefault(name, set()).add(thread)
                    if name == "nvmlDeviceGetFieldValues":
                        for field_id in args[1]:
                            self.stats.field_threads.setdefault(field_id, set()).add(thread)

        setattr(self, name, call)  # found directly from now on
        return call

    def _check(self, name: str, args: tuple[Any, ...]) -> None:
        if name in ("nvmlInit", "nvmlShutdown", "nvmlSystemGetDriverVersion", "nvmlEventSetCreate"):
            return
        if not self.initialised:
            raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)
        handle = args[0] if args else None
        index = handle.index if isinstance(handle, FakeHandle) else None
        if isinstance(handle, FakeMigHandle):
            index = handle.parent
        if index is not None and index in self.lost_at and self.clock() >= self.lost_at[index]:
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        if index is not None and index in self.no_power and name in POWER_CALLS:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def _spend(self, name: str, args: tuple[Any, ...]) -> None:
        phase = "under_load" if self.now_row()["phase"] == "load" else "idle"
        wall_us, cpu_us = self._cost(name, args, phase)
        started_wall = time.perf_counter()
        cpu_end = time.thread_time() + cpu_us / 1e6
        while time.thread_time() < cpu_end:  # the driver spins: so do we
            pass
        rest = wall_us / 1e6 - (time.perf_counter() - started_wall)
        if rest > 0:
            time.sleep(rest)

    def _cost(self, name: str, args: tuple[Any, ...], phase: str) -> tuple[float, float]:
        table = self.costs[phase]
        if name == "nvmlDeviceGetFieldValues":
            ids = set(args[1])
            keys = []
            if ids & THROTTLE_FIELDS:
                keys.append("fv_throttle_ns")
            if ids & {pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, pynvml.NVML_FI_DEV_ENERGY}:
                keys.append("fv_energy_only")
            if pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER in ids:
                keys.append("fv_pcie_replay")
            if not keys:
                keys.append("fv_fast_bundle")
            return (
                sum(table[k]["wall_us_median"] for k in keys),
                sum(table[k]["cpu_us_median"] for k in keys),
            )
        key = CALL_COST.get(name)
        if key is None or key not in table:
            return DEFAULT_COST
        return table[key]["wall_us_median"], table[key]["cpu_us_median"]

    # Each `_nvml…` below implements the pynvml function of the same name.

    def _nvmlInit(self) -> None:
        self.initialised = True

    def _nvmlShutdown(self) -> None:
        self.initialised = False

    def _nvmlSystemGetDriverVersion(self) -> str:
        return str(self.driver)

    def _nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def _nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        if not 0 <= index < self.gpus:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return FakeHandle(index)

    def _nvmlDeviceGetName(self, handle: Any) -> str:
        if isinstance(handle, FakeMigHandle):
            return f"{self.device['name']} MIG {self._mig_instance(handle).profile}"
        return str(self.device["name"])

    def _nvmlDeviceGetUUID(self, handle: Any) -> str:
        if isinstance(handle, FakeMigHandle):
            return self.mig_uuid(handle.parent, handle.slot)
        return self.gpu_uuid(handle.index)

    def gpu_uuid(self, index: int) -> str:
        """GPU `index`'s UUID: the caller's, else the capture's with the index in its tail."""
        if index < len(self.uuids):
            return self.uuids[index]
        base: str = self.device["uuid"]
        return base[:-2] + f"{index:02x}" if index else base

    def mig_uuid(self, parent: int, slot: int) -> str:
        """The UUID of MIG slot `slot` on GPU `parent` (what a device plugin lists)."""
        base = self.gpu_uuid(parent)
        return f"MIG-{parent:08x}-{slot:04x}-4000-8000-{base[-12:]}"

    def _nvmlDeviceGetSerial(self, handle: FakeHandle) -> str:
        return str(int(self.device["serial"]) + handle.index)

    def _nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> Obj:
        bus_id = f"00000000:{handle.index:02X}:06.0"
        return Obj({"busId": bus_id})

    def _nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> Obj:
        row = self.now_row()
        return Obj({"gpu": row["util_gpu"], "memory": row["util_mem"]})

    def _nvmlDeviceGetMemoryInfo(self, handle: Any) -> Obj:
        if isinstance(handle, FakeMigHandle):
            total = self._mig_instance(handle).mem_mib * 1024 * 1024
            return Obj({"total": total, "used": 0, "free": total})
        total = int(self.device["memory_info"]["total"])
        used = int(self.now_row()["mem_used_mib"] * 1024 * 1024)
        return Obj({"total": total, "used": used, "free": total - used})

    def _nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        return int(self.now_row()["temp_gpu_c"])

    def _nvmlDeviceGetMarginTemperature(self, handle: FakeHandle) -> int:
        return int(self.device["temp_threshold_gpu_max"]) - int(self.now_row()["temp_gpu_c"])

    def _nvmlDeviceGetTemperatureThreshold(self, handle: FakeHandle, kind: int) -> int:
        names = {
            pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: "temp_threshold_shutdown",
            pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: "temp_threshold_slowdown",
            pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX: "temp_threshold_mem_max",
            pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: "temp_threshold_gpu_max",
        }
        value = self.device.get(names.get(kind, "temp_threshold_acoustic_min"))
        if value is None or not_supported_in(value):
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(value)

    def _nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        return int(self.now_row()["power_avg_w"] * 1000)

    def _nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle) -> int:
        return int(self.device["power_limit_enforced_mw"])

    def _nvmlDeviceGetPowerManagementDefaultLimit(self, handle: FakeHandle) -> int:
        return int(self.device["power_limit_default_mw"])

    def _nvmlDeviceGetPowerManagementLimitConstraints(self, handle: FakeHandle) -> list[int]:
        return [int(v) for v in self.device["power_limit_constraints_mw"]]

    def _nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:
        return self.energy_mj(handle.index)

    def _nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock: int) -> int:
        row = self.now_row()
        return int(row["clock_sm_mhz"] if clock == pynvml.NVML_CLOCK_SM else row["clock_mem_mhz"])

    def _nvmlDeviceGetPerformanceState(self, handle: FakeHandle) -> int:
        return int(self.now_row()["pstate"])

    def _nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:
        return int(self.now_row()["clocks_event_reasons"])

    def _nvmlDeviceGetFanSpeed(self, handle: FakeHandle) -> int:
        raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)  # no fans on the SXM board

    def _nvmlDeviceGetNvLinkState(self, handle: FakeHandle, link: int) -> int:
        if not self.nvlinks:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)  # the capture: no NVLink peers
        if link >= self.nvlinks:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(pynvml.NVML_FEATURE_ENABLED)

    def _nvmlDeviceGetRemappedRows(self, handle: FakeHandle) -> list[int]:
        return [int(v) for v in self.device["remapped_rows"]]

    def _nvmlDeviceGetPcieThroughput(self, handle: FakeHandle, counter: int) -> int:
        return 2_400_000 if self.now_row()["phase"] == "load" else 1_200  # KB/s

    def _nvmlDeviceGetMigMode(self, handle: FakeHandle) -> list[int]:
        return [1, 1] if handle.index in self.mig else [int(v) for v in self.device["mig_mode"]]

    def _nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeHandle) -> int:
        return 7 if handle.index in self.mig else 0

    def _nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeHandle, slot: int) -> FakeMigHandle:
        if slot >= len(self.mig.get(handle.index, [])):
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return FakeMigHandle(handle.index, slot)

    def _nvmlDeviceGetGpuInstanceId(self, handle: FakeMigHandle) -> int:
        return self._mig_instance(handle).gi

    def _nvmlDeviceGetComputeInstanceId(self, handle: FakeMigHandle) -> int:
        return self._mig_instance(handle).ci

    def _nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Obj]:
        return self._process_infos(handle, graphics=False)

    def _nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[Obj]:
        return self._process_infos(handle, graphics=True)

    def _nvmlDeviceGetProcessUtilization(self, handle: Any, since_us: int) -> list[Obj]:
        if isinstance(handle, FakeMigHandle):  # nvml.h: not supported on MIG devices
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        now_us = int(self.clock() * 1e6) + 1
        busy = [p for p in self.processes.get(handle.index, []) if p.sm_pct > 0]
        if not busy or since_us >= now_us:
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)  # nothing newer: idle
        return [Obj({"pid": p.pid, "timeStamp": now_us, "smUtil": p.sm_pct}) for p in busy]

    def _nvmlDeviceGetMinorNumber(self, handle: FakeHandle) -> int:
        return handle.index

    def _nvmlDeviceGetSupportedEventTypes(self, handle: FakeHandle) -> int:
        return int(self.device["supported_event_types"])

    def _nvmlEventSetCreate(self) -> object:
        return object()

    def _nvmlDeviceRegisterEvents(self, handle: FakeHandle, mask: int, event_set: object) -> None:
        return None

    def _nvmlEventSetFree(self, event_set: object) -> None:
        return None

    def _nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int) -> Obj:
        try:
            index, kind, data = self._events.get(timeout=timeout_ms / 1000.0)
        except queue.Empty:
            raise nvml_error(pynvml.NVML_ERROR_TIMEOUT) from None
        return Obj(
            {
                "device": FakeHandle(index),
                "eventType": kind,
                "eventData": data,
                "gpuInstanceId": 0xFFFFFFFF,
                "computeInstanceId": 0xFFFFFFFF,
            }
        )

    def _nvmlDeviceGetFieldValues(
        self, handle: FakeHandle, field_ids: list[int]
    ) -> list[FieldAnswer]:
        row = self.now_row()
        return [self._field(handle.index, fid, row) for fid in field_ids]

    # -- helpers -----------------------------------------------------------------------------

    def _field(self, index: int, fid: int, row: dict[str, Any]) -> FieldAnswer:
        if index in self.no_power and fid in POWER_FIELDS:
            return FieldAnswer(fid, pynvml.NVML_ERROR_NOT_SUPPORTED, 0, Value())
        mine = self.memory_errors.get(index, {})
        if fid in mine:
            count = mine[fid]
            if count is None:
                return FieldAnswer(fid, pynvml.NVML_ERROR_NOT_SUPPORTED, 0, Value())
            if isinstance(count, str):
                return FieldAnswer(fid, int(count.removeprefix("ret=")), 0, Value())
            return FieldAnswer(fid, 0, 3, Value(ullVal=count))
        energy = self.energy_mj(index)
        live = {
            pynvml.NVML_FI_DEV_MEMORY_TEMP: row["temp_mem_c"],
            pynvml.NVML_FI_DEV_POWER_INSTANT: row["power_instant_w"] * 1000,
            pynvml.NVML_FI_DEV_POWER_AVERAGE: row["power_avg_w"] * 1000,
            pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: energy,
            pynvml.NVML_FI_DEV_ENERGY: energy,
            pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: row["ecc_sbe_vol"],
            pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: row["ecc_dbe_vol"],
            pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER: row["pcie_replay"],
            pynvml.NVML_FI_DEV_PERF_POLICY_POWER: row["violation_power_ns"],
            pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL: row["violation_thermal_ns"],
        }
        if self.nvlinks:
            live[pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL] = self.nvlink_errors["crc"]
            live[pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL] = self.nvlink_errors["replay"]
            live[pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL] = self.nvlink_errors[
                "recovery"
            ]
        if fid in live:
            return FieldAnswer(fid, 0, 3, Value(ullVal=int(live[fid])))
        name = self._field_names.get(fid)
        value = self.idle_fields.get(name) if name else None
        if value is None:
            return FieldAnswer(fid, pynvml.NVML_ERROR_NOT_SUPPORTED, 0, Value())
        if isinstance(value, str) and value.startswith("ret="):
            return FieldAnswer(fid, int(value[4:]), 0, Value())
        if isinstance(value, float):
            return FieldAnswer(fid, 0, 0, Value(dVal=value))
        return FieldAnswer(fid, 0, 4, Value(sllVal=int(value)))

    def _process_infos(self, handle: Any, graphics: bool) -> list[Obj]:
        key = (handle.parent, handle.slot) if isinstance(handle, FakeMigHandle) else handle.index
        mig = isinstance(handle, FakeMigHandle)
        return [
            Obj(
                {
                    "pid": p.pid,
                    "usedGpuMemory": p.used_mib * 1024 * 1024,
                    "gpuInstanceId": self._mig_instance(handle).gi if mig else 0xFFFFFFFF,
                    "computeInstanceId": self._mig_instance(handle).ci if mig else 0xFFFFFFFF,
                }
            )
            for p in self.processes.get(key, [])
            if p.graphics == graphics
        ]

    def _mig_instance(self, handle: FakeMigHandle) -> MigInstance:
        return self.mig[handle.parent][handle.slot]


def from_spec(spec: str) -> FakeNvml:
    """`nvml = "fake:<capture dir>[::gpus]"` in the agent's configuration (entry point
    `fleet_agent.nvml` "fake", declared by the server's distribution)."""
    path, _, gpus = spec.partition("::")
    return FakeNvml(Path(path), gpus=int(gpus or 1))
