"""A stand-in `pynvml` for an agent installed from its wheel on a machine with no GPU.

Put this directory first on PYTHONPATH: `import pynvml` then finds this module, which takes
the real module's constants and error classes (the agent's wrapper compares codes) and
answers for one GPU. Every NVML function it does not define raises NOT_SUPPORTED, which the
agent treats as a field this GPU lacks ("unsupported is a value"), as on a real card.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def _real_pynvml() -> Any:
    here = Path(__file__).resolve().parent
    for entry in sys.path:
        candidate = Path(entry or ".").resolve() / "pynvml.py"
        if candidate.is_file() and candidate.parent != here:
            spec = importlib.util.spec_from_file_location("_real_pynvml", candidate)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules["_real_pynvml"] = module  # it looks itself up there as it loads
            spec.loader.exec_module(module)
            return module
    raise ImportError("the real pynvml (nvidia-ml-py) is not installed beside the fake")


_real = _real_pynvml()
# Constants, error classes and structures from the real module; none of its functions.
globals().update(
    {
        name: value
        for name, value in vars(_real).items()
        if not name.startswith("_") and not inspect.isfunction(value)
    }
)
NVMLError = _real.NVMLError

FAKE_GPU_NAME = "Fake H200 (test)"
_HANDLE = object()


def nvmlInit() -> None:
    return None


def nvmlShutdown() -> None:
    return None


def nvmlSystemGetDriverVersion() -> str:
    return "999.0.fake"


def nvmlDeviceGetCount() -> int:
    return 1


def nvmlDeviceGetHandleByIndex(index: int) -> object:
    if index != 0:
        raise NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
    return _HANDLE


def nvmlDeviceGetName(handle: object) -> str:
    return FAKE_GPU_NAME


def nvmlDeviceGetUUID(handle: object) -> str:
    return "GPU-00000000-fake-0000-0000-000000000000"


def nvmlDeviceGetTemperature(handle: object, sensor: int) -> int:
    return 41


def nvmlDeviceGetPowerUsage(handle: object) -> int:
    return 123_000  # mW


def nvmlDeviceGetUtilizationRates(handle: object) -> SimpleNamespace:
    return SimpleNamespace(gpu=37, memory=12)


def __getattr__(name: str) -> Any:
    if name.startswith("nvml"):

        def not_supported(*args: Any, **kwargs: Any) -> Any:
            raise NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)

        return not_supported
    raise AttributeError(name)
