"""The one place the agent calls NVML.

nvitop's rule: an unsupported field is a normal answer, not an exception. `Nvml.get()`
returns `None` for NotSupported / NoPermission / FunctionNotFound (a driver or binding
mismatch), remembers it so that call is not made again for that device, and the caller
leaves the field out of the sample. A GPU that fell off the bus (`GPU_IS_LOST`) raises
`GpuLost`, which the GPU collector turns into an error record; nothing else escapes.

`lib` is the `pynvml` module or anything with the same names (the fake in `fake.py`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import pynvml

from agents.log import get_logger

log = get_logger("agents.nvml")

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


class Nvml:
    def __init__(self, lib: Any = pynvml) -> None:
        self.lib = lib
        self._unsupported: set[tuple[int, str]] = set()
        self._errors_logged: set[tuple[int, str, int]] = set()

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

    def handle(self, index: int) -> Any:
        return self.lib.nvmlDeviceGetHandleByIndex(index)

    def driver_version(self) -> str | None:
        value = self.get(-1, "nvmlSystemGetDriverVersion")
        return None if value is None else _text(value)

    def supported(self, index: int, call: str) -> bool:
        return (index, call) not in self._unsupported

    def get(self, index: int, call: str, *args: Any) -> Any | None:
        """`lib.<call>(*args)`, or None if the device does not support it. Raises GpuLost."""
        key = (index, call)
        if key in self._unsupported:
            return None
        try:
            return getattr(self.lib, call)(*args)
        except pynvml.NVMLError as exc:
            self._failed(index, call, exc)
            return None
        except AttributeError:  # the binding predates this call
            self._unsupported.add(key)
            return None

    def probe(self, index: int, call: str, *args: Any) -> Any | None:
        """Like `get`, but an unsupported answer is not remembered: for calls whose answer
        depends on the argument (NVLink link N exists, link N+1 does not)."""
        try:
            return getattr(self.lib, call)(*args)
        except pynvml.NVMLError as exc:
            if int(getattr(exc, "value", -1)) in LOST_CODES:
                raise GpuLost(index, call) from None
            return None
        except AttributeError:
            return None

    def field_values(
        self, index: int, handle: Any, field_ids: Sequence[int], label: str
    ) -> dict[int, float] | None:
        """Several fields in one call; each unsupported field is simply absent from the answer."""
        key = (index, f"fields:{label}")
        if key in self._unsupported:
            return None
        try:
            answers = self.lib.nvmlDeviceGetFieldValues(handle, list(field_ids))
        except pynvml.NVMLError as exc:
            self._failed(index, key[1], exc)
            return None
        values: dict[int, float] = {}
        for answer in answers:
            ret = int(answer.nvmlReturn)
            if ret in LOST_CODES:
                raise GpuLost(index, key[1])
            if ret != 0:
                continue
            member = _VALUE_MEMBER.get(int(answer.valueType))
            if member is not None:
                values[int(answer.fieldId)] = getattr(answer.value, member)
        if not values:
            self._unsupported.add(key)  # nothing in this bundle exists here: stop asking
            return None
        return values

    def _failed(self, index: int, call: str, exc: Any) -> None:
        code = int(getattr(exc, "value", -1))
        if code in LOST_CODES:
            raise GpuLost(index, call)
        if code in UNSUPPORTED_CODES:
            self._unsupported.add((index, call))
            return
        # Anything else (timeout, unknown) may pass: report it once per kind, try again later.
        if (index, call, code) not in self._errors_logged:
            self._errors_logged.add((index, call, code))
            log.warning("NVML call failed", gpu=index, call=call, error=str(exc))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
