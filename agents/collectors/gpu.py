"""The GPU collector: NVML through the wrapper, fast fields every tick, slow ones on the slow lane.

Every tick, per GPU, about ten getters of 2–10 µs and one bundled field-values call. The
reads that burn milliseconds (energy, violation time, PCIe) are `SlowRead`s: the runner runs
them on a thread of their own at their own cadence, staggered across GPUs.

A GPU that falls off the bus (`GPU_IS_LOST`) becomes a `gpu_lost` event and is no longer
polled; the other GPUs carry on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml

from agents.collectors.base import Reading, SlowRead
from agents.collectors.gpu_fields import (
    FAST_FIELDS,
    MEMORY_ERROR_FIELDS,
    MIB,
    NVLINK_ERROR_FIELDS,
    NVLINK_MAX_LINKS,
    PCIE_REPLAY_FIELDS,
    PSTATE_UNKNOWN,
    TEMPERATURE_THRESHOLDS,
    THROTTLE_FIELDS,
    TLIMIT_FIELDS,
    scaled,
)
from agents.collectors.gpu_resets import BOOT_ID, ResetWatch, boot_id
from agents.log import get_logger
from agents.nvml.events import EventWatcher
from agents.nvml.wrapper import GpuLost, Nvml
from agents.protocol.memory import MEMORY_ERRORS_KEY, NOT_SUPPORTED

log = get_logger("agents.collectors.gpu")

_FieldRead = Callable[[int, Any], dict[str, Any]]


class GpuCollector:
    name = "gpu"

    def __init__(
        self,
        nvml: Nvml,
        interval_s: float = 1.0,
        throttle_every: int = 10,
        energy_every: int = 30,
        pcie_every: int = 60,
        pcie_throughput_every: int = 300,
        mig_every: int = 60,
        memory_errors_every: int = 60,
        watch_events: bool = True,
        state_path: Path | None = None,
        boot_path: Path = BOOT_ID,
    ) -> None:
        self.nvml = nvml
        self.interval_s = interval_s
        self.throttle_every = throttle_every
        self.energy_every = energy_every
        self.pcie_every = pcie_every
        self.pcie_throughput_every = pcie_throughput_every
        self.mig_every = mig_every
        self.memory_errors_every = memory_errors_every
        self.state_path = state_path  # where resets are watched across restarts (None: not)
        self.boot_path = boot_path
        self.resets = ResetWatch(None, None, None)
        self.watch_events = watch_events
        self.handles: dict[int, Any] = {}
        self.info: dict[int, dict[str, Any]] = {}
        self.lost: set[int] = set()
        self._nvlink_links: dict[int, int] = {}
        self._info_due = True
        self._pending_events: list[dict[str, Any]] = []
        self._lock = threading.Lock()  # `lost` and pending events: both lanes touch them
        self.events: EventWatcher | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def setup(self) -> None:
        self.nvml.init()
        driver = self.nvml.driver_version()
        for index in range(self.nvml.device_count()):
            try:
                handle = self.nvml.handle(index)
            except pynvml.NVMLError as exc:
                self._lose(index, f"no handle: {exc}")
                continue
            self.handles[index] = handle
            try:
                self.info[index] = self._device_info(index, handle, driver)
            except GpuLost as exc:
                self._lose(index, str(exc))
        self._watch_resets(driver)
        if self.watch_events and self.handles:
            self.events = EventWatcher(self.nvml, self.handles)
            if not self.events.start():
                self.events = None

    def _watch_resets(self, driver: str | None) -> None:
        """The GPUs' resets and driver reloads, those while the agent was stopped included:
        judged on the energy reads of the slow lane (gpu_resets.py)."""
        self.resets = ResetWatch(self.state_path, boot_id(self.boot_path), driver)
        gpus = {i: str(info["uuid"]) for i, info in self.info.items() if info.get("uuid")}
        events = self.resets.start(gpus, time.time())
        with self._lock:
            self._pending_events.extend(events)

    def close(self) -> None:
        self.resets.save(time.time(), force=True)
        if self.events is not None:
            self.events.stop()
        self.nvml.shutdown()

    # -- the fast tick -----------------------------------------------------------------------

    def collect(self, now: float) -> Reading:
        reading = Reading()
        for index, handle in self.handles.items():
            if index in self.lost:
                continue
            try:
                reading.add("gpu", self._fast(index, handle, now))
            except GpuLost as exc:
                self._lose(index, str(exc))
        if self._info_due:
            reading.gpu_info = [self.info[i] for i in sorted(self.info) if i not in self.lost]
            self._info_due = False
        if self.events is not None:
            reading.events.extend(self.events.drain())
        with self._lock:
            reading.events.extend(self._pending_events)
            self._pending_events = []
        return reading

    def _fast(self, index: int, handle: Any, now: float) -> dict[str, Any]:
        nvml = self.nvml
        sample: dict[str, Any] = {"ts": now, "gpu": index}
        util = nvml.utilization(index, handle)
        if util is not None:
            sample["util_gpu_pct"] = util.gpu_pct
            sample["util_mem_pct"] = util.memory_pct
        memory = nvml.memory_info(index, handle)
        if memory is not None:
            sample["mem_used_mib"] = round(memory.used_bytes / MIB)
            sample["mem_total_mib"] = round(memory.total_bytes / MIB)
        _put(sample, "temp_gpu_c", nvml.temperature_c(index, handle, pynvml.NVML_TEMPERATURE_GPU))
        _put(sample, "temp_margin_c", nvml.margin_temperature_c(index, handle))
        _put(sample, "power_w", nvml.power_usage_mw(index, handle), 0.001)
        _put(sample, "power_limit_w", nvml.enforced_power_limit_mw(index, handle), 0.001)
        _put(sample, "clock_sm_mhz", nvml.clock_mhz(index, handle, pynvml.NVML_CLOCK_SM))
        _put(sample, "clock_mem_mhz", nvml.clock_mhz(index, handle, pynvml.NVML_CLOCK_MEM))
        pstate = nvml.performance_state(index, handle)
        if pstate is not None and pstate != PSTATE_UNKNOWN:
            sample["pstate"] = pstate
        _put(sample, "clock_event_reasons", nvml.clock_event_reasons(index, handle))
        _put(sample, "fan_pct", nvml.fan_speed_pct(index, handle))
        sample.update(
            scaled(nvml.field_values(index, handle, list(FAST_FIELDS), "fast"), FAST_FIELDS)
        )
        return sample

    # -- the slow lane -----------------------------------------------------------------------

    def slow_reads(self) -> list[SlowRead]:
        reads: list[SlowRead] = []
        count = max(1, len(self.handles))
        for position, index in enumerate(sorted(self.handles)):
            for name, every, fn in (  # every <= 0 turns a read off
                ("throttle", self.throttle_every, self._read_throttle),
                ("energy", self.energy_every, self._read_energy),
                ("pcie", self.pcie_every, self._read_pcie),
                ("pcie_throughput", self.pcie_throughput_every, self._read_pcie_throughput),
                ("mig", self.mig_every, self._read_mig),
                ("memory_errors", self.memory_errors_every, self._read_memory_errors),
            ):
                # Stagger: GPU k of n reads at k/n of the cycle, so no tick carries them all.
                if every <= 0:
                    continue
                offset = (position * every) // count
                reads.append(
                    SlowRead(f"gpu{index}:{name}", every, offset, self._guarded(index, fn))
                )
        return reads

    def _guarded(self, index: int, fn: _FieldRead) -> Callable[[float], Reading]:
        """A slow read of one GPU that turns "the GPU is gone" into a gpu_lost event."""

        def read(now: float) -> Reading:
            reading = Reading()
            if index in self.lost:
                return reading
            try:
                fields = fn(index, self.handles[index])
            except GpuLost as exc:
                self._lose(index, str(exc))
                return reading
            if fields:
                reading.add("gpu", {"ts": now, "gpu": index, **fields})
            return reading

        return read

    def _read_throttle(self, index: int, handle: Any) -> dict[str, Any]:
        return scaled(
            self.nvml.field_values(index, handle, list(THROTTLE_FIELDS), "throttle"),
            THROTTLE_FIELDS,
        )

    def _read_energy(self, index: int, handle: Any) -> dict[str, Any]:
        millijoules = self.nvml.total_energy_mj(index, handle)
        if millijoules is None:
            return {}
        uuid = self.info.get(index, {}).get("uuid")
        if uuid:
            events = self.resets.energy(
                index, uuid, millijoules, time.time(), self.nvml.driver_version
            )
            with self._lock:
                self._pending_events.extend(events)
        return {"energy_j": round(millijoules / 1000.0, 3)}

    def _read_memory_errors(self, index: int, handle: Any) -> dict[str, Any]:
        """Lifetime ECC and retired pages: kept in gpu_info, sent again when they change. A
        field that failed this time keeps the value read before (a failure is no news)."""
        info = self.info.get(index)
        if info is None:
            return {}
        block = {**info.get(MEMORY_ERRORS_KEY, {}), **self._memory_errors(index, handle)}
        if block and block != info.get(MEMORY_ERRORS_KEY):
            info[MEMORY_ERRORS_KEY] = block
            self._info_due = True
        return {}

    def _memory_errors(self, index: int, handle: Any) -> dict[str, Any]:
        """One field-values call (~8 µs on the H200): each count, or "not_supported"
        where NVML says the GPU has no such thing; a field that failed is left out."""
        answers = self.nvml.field_answers(index, handle, list(MEMORY_ERROR_FIELDS))
        block: dict[str, Any] = {}
        for field_id, key in MEMORY_ERROR_FIELDS.items():
            if field_id in answers:
                value = answers[field_id]
                block[key] = NOT_SUPPORTED if value is None else int(value)
        return block

    def _read_pcie(self, index: int, handle: Any) -> dict[str, Any]:
        fields = scaled(
            self.nvml.field_values(index, handle, list(PCIE_REPLAY_FIELDS), "pcie_replay"),
            PCIE_REPLAY_FIELDS,
        )
        fields.update(self._read_nvlink(index, handle))
        return fields

    def _read_pcie_throughput(self, index: int, handle: Any) -> dict[str, Any]:
        # NVML samples for 20 ms and sleeps meanwhile (~21 ms a call, two calls): a
        # 20 ms glimpse says little about throughput anyway, so it is read rarely.
        fields: dict[str, Any] = {}
        for name, counter in (
            ("pcie_tx_kib_s", pynvml.NVML_PCIE_UTIL_TX_BYTES),
            ("pcie_rx_kib_s", pynvml.NVML_PCIE_UTIL_RX_BYTES),
        ):
            _put(fields, name, self.nvml.pcie_throughput_kib_s(index, handle, counter))
        return fields

    def _read_nvlink(self, index: int, handle: Any) -> dict[str, Any]:
        links = self._nvlink_links.get(index)
        if links is None:  # probe once: how many links does this GPU have?
            links = 0
            while links < NVLINK_MAX_LINKS and (
                self.nvml.nvlink_is_up(index, handle, links) is not None
            ):
                links += 1
            self._nvlink_links[index] = links
        if not links:
            return {}  # no NVLink here (PCIe card, or a VM without peers): fields left out
        up = sum(bool(self.nvml.nvlink_is_up(index, handle, link)) for link in range(links))
        fields: dict[str, Any] = {"nvlink_up": up}
        errors = self.nvml.field_values(index, handle, list(NVLINK_ERROR_FIELDS), "nvlink_errors")
        fields.update(scaled(errors, NVLINK_ERROR_FIELDS))
        return fields

    def _read_mig(self, index: int, handle: Any) -> dict[str, Any]:
        mig_mode, mig = self._mig(index, handle)
        info = self.info.get(index)
        if info is not None and (info.get("mig_mode"), info.get("mig")) != (mig_mode, mig):
            info["mig_mode"], info["mig"] = mig_mode, mig
            self._info_due = True  # the layout changed: send gpu_info again
        return {}

    # -- static facts ------------------------------------------------------------------------

    def _device_info(self, index: int, handle: Any, driver: str | None) -> dict[str, Any]:
        nvml = self.nvml
        info: dict[str, Any] = {"gpu": index}
        for key, value in (
            ("uuid", nvml.uuid(index, handle)),
            ("model", nvml.name(index, handle)),
            ("serial", nvml.serial(index, handle)),
            ("pci_bus_id", nvml.pci_bus_id(index, handle)),
        ):
            if value is not None:
                info[key] = value
        memory = nvml.memory_info(index, handle)
        if memory is not None:
            info["mem_total_mib"] = round(memory.total_bytes / MIB)
        if driver:
            info["driver"] = driver
        info["mig_mode"], info["mig"] = self._mig(index, handle)
        info["limits"] = self._limits(index, handle)
        errors = self._memory_errors(index, handle)
        if errors:
            info[MEMORY_ERRORS_KEY] = errors
        return info

    def _limits(self, index: int, handle: Any) -> dict[str, Any]:
        """Read once: the device's own thresholds, absolute and as T.Limit offsets."""
        nvml = self.nvml
        limits: dict[str, Any] = {}
        for name, kind in TEMPERATURE_THRESHOLDS.items():
            _put(limits, name, nvml.temperature_threshold_c(index, handle, kind))
        _put(limits, "power_limit_default_w", nvml.default_power_limit_mw(index, handle), 0.001)
        constraints = nvml.power_limit_constraints_mw(index, handle)
        if constraints is not None:
            limits["power_limit_min_w"] = constraints[0] / 1000.0
            limits["power_limit_max_w"] = constraints[1] / 1000.0
        limits.update(
            scaled(nvml.field_values(index, handle, list(TLIMIT_FIELDS), "tlimit"), TLIMIT_FIELDS)
        )
        return limits

    def _mig(self, index: int, handle: Any) -> tuple[bool, list[dict[str, Any]]]:
        nvml = self.nvml
        if not nvml.mig_enabled(index, handle):
            return False, []
        instances: list[dict[str, Any]] = []
        for slot in range(nvml.max_mig_device_count(index, handle) or 0):
            mig = nvml.mig_device_handle(index, handle, slot)
            if mig is None:
                continue  # an empty slot
            name = nvml.name(index, mig) or ""
            memory = nvml.memory_info(index, mig)
            instances.append(
                {
                    "gi": nvml.gpu_instance_id(index, mig) or 0,
                    "ci": nvml.compute_instance_id(index, mig) or 0,
                    "profile": name.rsplit(" ", 1)[-1] if "MIG" in name else name,
                    "mem_mib": round(memory.total_bytes / MIB) if memory is not None else 0,
                }
            )
        return True, instances

    def _lose(self, index: int, detail: str) -> None:
        with self._lock:
            if index in self.lost:
                return
            self.lost.add(index)
            self._pending_events.append(
                {"ts": round(time.time(), 3), "gpu": index, "kind": "gpu_lost", "detail": detail}
            )
        log.error("GPU lost: no longer polled", gpu=index, detail=detail)
        uuid = self.info.get(index, {}).get("uuid")
        if uuid:  # not waited for by the reset watch
            events = self.resets.forget(str(uuid), time.time())
            with self._lock:
                self._pending_events.extend(events)


def _put(sample: dict[str, Any], name: str, value: Any, scale: float = 1.0) -> None:
    """Set `name` only when NVML answered: an unsupported field is left out, never 0."""
    if value is None:
        return
    number = value * scale
    sample[name] = int(number) if scale == 1.0 else round(number, 3)
