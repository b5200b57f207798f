"""NVML events (XID, ECC) on a thread of their own: `nvmlEventSetWait` blocks, the tick must not."""

from __future__ import annotations

import ctypes
import queue
import threading
import time
from typing import Any

import pynvml

from agents.log import get_logger
from agents.nvml.wrapper import Nvml, NvmlEvent

log = get_logger("agents.nvml.events")

# What the event types mean for the protocol's `events` list.
_KINDS = {
    pynvml.nvmlEventTypeXidCriticalError: "xid",
    pynvml.nvmlEventTypeSingleBitEccError: "ecc_sbe",
    pynvml.nvmlEventTypeDoubleBitEccError: "ecc_dbe",
}
WANTED_MASK = (
    pynvml.nvmlEventTypeXidCriticalError
    | pynvml.nvmlEventTypeSingleBitEccError
    | pynvml.nvmlEventTypeDoubleBitEccError
)
# The XIDs an operator meets most on data-centre GPUs (NVIDIA's XID catalogue).
XID_MEANING = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup after an error",
    48: "double-bit ECC error",
    63: "row remapping recorded",
    64: "row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}


def handle_key(handle: Any) -> Any:
    """Something hashable that is equal for two handles of the same device."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return handle


class EventWatcher:
    def __init__(self, nvml: Nvml, handles: dict[int, Any], wait_ms: int = 500) -> None:
        self.nvml = nvml
        self.wait_ms = wait_ms
        self.events: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self._index_of = {handle_key(h): i for i, h in handles.items()}
        self._handles = handles
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._set: Any = None

    def start(self) -> bool:
        """Register for XID/ECC events on every device that supports them; False if none."""
        self._set = self.nvml.create_event_set()
        if self._set is None:
            return False
        registered = 0
        for index, handle in self._handles.items():
            mask = WANTED_MASK & (self.nvml.supported_event_types(index, handle) or 0)
            if not mask:
                continue
            try:
                self.nvml.register_events(handle, mask, self._set)
                registered += 1
            except pynvml.NVMLError as exc:
                log.info("no NVML events for this GPU", gpu=index, error=str(exc))
        if not registered:
            return False
        self._thread = threading.Thread(target=self._loop, name="nvml-events", daemon=True)
        self._thread.start()
        return True

    def drain(self) -> list[dict[str, Any]]:
        drained = []
        while True:
            try:
                drained.append(self.events.get_nowait())
            except queue.Empty:
                return drained

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.wait_ms / 1000.0 + 1.0)
        if self._set is not None:
            self.nvml.free_event_set(self._set)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                happened = self.nvml.wait_for_event(self._set, self.wait_ms)
            except pynvml.NVMLError as exc:
                log.warning("NVML event wait failed", error=str(exc))
                self._stop.wait(1.0)
                continue
            if happened is not None:  # None: the wait timed out, nothing happened
                self.events.put(self._event(happened))

    def _event(self, happened: NvmlEvent) -> dict[str, Any]:
        kind = _KINDS.get(happened.event_type, "note")
        event: dict[str, Any] = {"ts": round(time.time(), 3), "kind": kind}
        index = self._index_of.get(handle_key(happened.device))
        if index is not None:
            event["gpu"] = index
        if kind == "xid":
            code = happened.data
            event["code"] = code
            event["detail"] = XID_MEANING.get(code, f"XID {code}")
        else:
            event["detail"] = f"NVML event type {happened.event_type:#x}"
        return event
