"""NVML's processes per GPU and their SM use, through the wrapper, on the fake H200s."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pynvml

from agents.nvml.wrapper import GpuProcess, Nvml
from fleetsim.nvml_answers import FakeProcess, MigInstance
from tests.support.nvml_scenarios import fake_gpus

MIB = 1024 * 1024


def _nvml(**scenario: Any) -> Nvml:
    nvml = Nvml(fake_gpus(1, **scenario))
    nvml.init()
    return nvml


def test_compute_and_graphics_processes_are_listed_once_per_pid_with_their_memory() -> None:
    nvml = _nvml(
        processes={
            0: [
                FakeProcess(100, 2048, sm_pct=60),
                FakeProcess(200, 512, graphics=True),
                FakeProcess(100, 1024, graphics=True),  # one process, both kinds of context
            ]
        }
    )
    handle = nvml.handle(0)
    found = sorted(nvml.running_processes(0, handle) or [], key=lambda p: p.pid)
    assert found == [GpuProcess(100, 2048 * MIB), GpuProcess(200, 512 * MIB)]


def test_a_gpu_with_nothing_running_lists_no_process() -> None:
    nvml = _nvml()
    assert nvml.running_processes(0, nvml.handle(0)) == []


def test_sm_use_comes_per_busy_process_and_nothing_newer_reads_as_idle() -> None:
    nvml = _nvml(processes={0: [FakeProcess(100, 2048, sm_pct=60), FakeProcess(200, 512)]})
    handle = nvml.handle(0)
    samples = nvml.process_sm_utilization(0, handle, 0)
    assert samples is not None and [(pid, sm) for pid, _, sm in samples] == [(100, 60)]
    latest = max(stamp for _, stamp, _ in samples)
    assert nvml.process_sm_utilization(0, handle, latest) == []  # NOT_FOUND: idle, not an error
    assert nvml.process_sm_utilization(0, handle, 0) is not None  # and asked again next time


def test_per_process_sm_use_on_a_mig_device_is_unsupported_not_an_error() -> None:
    fake = fake_gpus(1, mig={0: [MigInstance("1g.18gb", 7, 0, 18 * 1024)]})
    fake.processes[(0, 0)] = [FakeProcess(300, 4096, sm_pct=80)]
    nvml = Nvml(fake)
    nvml.init()
    mig = nvml.mig_device_handle(0, nvml.handle(0), 0)
    assert nvml.running_processes(0, mig, ":mig0") == [GpuProcess(300, 4096 * MIB)]
    assert nvml.process_sm_utilization(0, mig, 0) is None
    assert (nvml.uuid(0, mig) or "").startswith("MIG-")


def test_a_driver_without_process_lists_reads_as_unsupported() -> None:
    fake = fake_gpus(1)
    fake.before["nvmlDeviceGetComputeRunningProcesses"] = _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
    fake.before["nvmlDeviceGetGraphicsRunningProcesses"] = _raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
    nvml = Nvml(fake)
    nvml.init()
    assert nvml.running_processes(0, nvml.handle(0)) is None


def _raise(code: int) -> Callable[[], None]:
    def hook() -> None:
        raise pynvml.NVMLError(code)

    return hook
