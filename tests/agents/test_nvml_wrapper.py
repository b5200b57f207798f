"""The NVML wrapper: every function it calls exists, in `pynvml` and in the fake.

A misspelt NVML name would not crash anything: the wrapper treats a function the binding
lacks as "unsupported" and the field silently disappears. So the names are read out of the
wrapper's source and checked here, where a typo fails loudly.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pynvml
import pytest

import agents
from agents.nvml import wrapper
from agents.nvml.wrapper import GpuLost, Nvml
from fleetsim.fake_nvml import FakeNvml
from tests.support.nvml_scenarios import CAPTURE, fake_gpus

AGENTS = Path(agents.__file__).resolve().parent
WRAPPER = Path(wrapper.__file__).resolve()
FAKE = AGENTS / "nvml" / "fake.py"


def nvml_functions_called(source: str) -> set[str]:
    """The NVML functions `source` calls: `lib.nvml…`, `self.lib.nvml…`, `pynvml.nvml…(…)`."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _is_nvml_function_on(node, "lib"):
            names.add(node.attr)
        # pynvml's constants (nvmlEventType…) share the prefix: on `pynvml`, only calls count.
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and _is_nvml_function_on(node.func, "pynvml")
        ):
            names.add(node.func.attr)
    return names


def _is_nvml_function_on(node: ast.Attribute, owner: str) -> bool:
    """`<owner>.nvml…` or `<anything>.<owner>.nvml…`."""
    value = node.value
    named = (isinstance(value, ast.Name) and value.id == owner) or (
        isinstance(value, ast.Attribute) and value.attr == owner
    )
    return named and node.attr.startswith("nvml")


def missing_from(library: object, names: Iterable[str]) -> list[str]:
    return sorted(name for name in names if not hasattr(library, name))


def _wrapper_calls() -> set[str]:
    return nvml_functions_called(WRAPPER.read_text())


def _initialised_fake(gpus: int = 1, **scenario: Any) -> tuple[FakeNvml, Nvml]:
    fake = fake_gpus(gpus, **scenario)
    nvml = Nvml(fake)
    nvml.init()
    return fake, nvml


# -- every name is real ------------------------------------------------------------------------


def test_every_nvml_function_the_wrapper_calls_exists_in_pynvml() -> None:
    called = _wrapper_calls()
    # The scan found the calls at all (an empty set would pass vacuously).
    assert {"nvmlDeviceGetPowerUsage", "nvmlDeviceGetFieldValues", "nvmlEventSetWait_v2"} <= called
    assert len(called) >= 30
    assert missing_from(pynvml, called) == []


def test_the_fake_answers_every_nvml_function_the_wrapper_calls() -> None:
    # A name the fake lacks reads as "unsupported": the tests would pass without the field.
    assert missing_from(FakeNvml(CAPTURE), _wrapper_calls()) == []


def test_a_misspelt_nvml_function_is_caught_by_the_check() -> None:
    source = (
        "class Reader:\n"
        "    def temperature(self, handle):\n"
        "        return self.lib.nvmlDeviceGetTemprature(handle, 0)\n"
        "    def power(self, handle):\n"
        "        return self.lib.nvmlDeviceGetPowerUsage(handle)\n"
    )
    called = nvml_functions_called(source)
    assert called == {"nvmlDeviceGetTemprature", "nvmlDeviceGetPowerUsage"}
    assert missing_from(pynvml, called) == ["nvmlDeviceGetTemprature"]
    assert missing_from(FakeNvml(CAPTURE), called) == ["nvmlDeviceGetTemprature"]


def test_only_the_wrapper_calls_nvml_functions() -> None:
    outside = {
        str(path.relative_to(AGENTS)): sorted(nvml_functions_called(path.read_text()))
        for path in sorted(AGENTS.rglob("*.py"))
        if path.resolve() not in (WRAPPER, FAKE.resolve())
    }
    assert {path: names for path, names in outside.items() if names} == {}


def test_the_wrapper_has_no_call_by_name_path() -> None:
    tree = ast.parse(WRAPPER.read_text())
    by_name = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and isinstance(node.args[0], ast.Attribute)
        and node.args[0].attr == "lib"
    ]
    assert by_name == []
    assert not hasattr(Nvml, "get") and not hasattr(Nvml, "probe")


# -- unsupported, lost: the semantics the typed reads keep -------------------------------------


def test_an_unsupported_read_is_none_and_not_asked_again_for_that_gpu() -> None:
    fake, nvml = _initialised_fake(2)
    first, second = nvml.handle(0), nvml.handle(1)
    assert nvml.fan_speed_pct(0, first) is None  # no fans on the SXM board
    assert nvml.fan_speed_pct(0, first) is None
    assert fake.stats.by_call["nvmlDeviceGetFanSpeed"] == 1
    assert nvml.fan_speed_pct(1, second) is None  # remembered per GPU, not for all
    assert fake.stats.by_call["nvmlDeviceGetFanSpeed"] == 2


def test_an_unsupported_threshold_does_not_hide_the_other_thresholds() -> None:
    _, nvml = _initialised_fake()
    handle = nvml.handle(0)
    acoustic = pynvml.NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MIN
    assert nvml.temperature_threshold_c(0, handle, acoustic) is None
    assert nvml.temperature_threshold_c(0, handle, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN) == 89


def test_a_read_of_a_gpu_that_fell_off_the_bus_raises_gpu_lost() -> None:
    _, nvml = _initialised_fake(lost_at={0: 0.0})
    handle = nvml.handle(0)
    with pytest.raises(GpuLost) as lost:
        nvml.power_usage_mw(0, handle)
    assert lost.value.index == 0


def test_a_binding_without_the_function_reads_as_unsupported() -> None:
    class OldBinding:  # an installed pynvml older than the call
        pass

    nvml = Nvml(OldBinding())
    assert nvml.margin_temperature_c(0, object()) is None
    assert nvml.create_event_set() is None


def test_typed_reads_answer_plain_values_from_the_capture() -> None:
    _, nvml = _initialised_fake()
    handle = nvml.handle(0)
    memory = nvml.memory_info(0, handle)
    assert memory is not None and memory.total_bytes > memory.used_bytes > 0
    assert nvml.power_limit_constraints_mw(0, handle) == (200_000, 700_000)
    assert nvml.mig_enabled(0, handle) is False
    assert nvml.name(0, handle) == "NVIDIA H200"


def test_an_event_wait_that_times_out_is_none_not_an_error() -> None:
    fake, nvml = _initialised_fake()
    event_set = nvml.create_event_set()
    assert nvml.wait_for_event(event_set, 1) is None
    fake.inject_xid(0, 79)
    happened = nvml.wait_for_event(event_set, 1000)
    assert happened is not None
    assert (happened.event_type, happened.data) == (pynvml.nvmlEventTypeXidCriticalError, 79)
