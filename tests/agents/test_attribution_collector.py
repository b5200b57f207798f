"""The workloads collector: who runs on each GPU, on the slow lane, into the batch."""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from agents.attribution import podresources
from agents.attribution.cgroups import ProcReader
from agents.attribution.slurm import Scontrol
from agents.collectors.workloads import WorkloadCollector
from agents.nvml.wrapper import Nvml
from agents.outbox import build_batch
from agents.protocol.validate import validate_batch
from agents.runner import CollectorSet
from fleetsim.fake_nvml import FakeNvml
from fleetsim.nvml_answers import FakeProcess, MigInstance
from tests.support.nvml_scenarios import fake_gpus

PROC = Path(__file__).resolve().parents[1] / "data" / "proc"
POD_UID = "1f6a3c2e-9b4d-4e8a-a1c7-5d2f0e9b3a61"
SHAPES = ("systemd-containerd-burstable", "slurm-v2-job", "user")  # PIDs 4101, 4110, 4112
GONE = 4999  # listed by NVML, exited before /proc was read


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    """One /proc holding the processes of several recorded shapes."""
    for shape in SHAPES:
        for pid_dir in (PROC / shape).iterdir():
            shutil.copytree(pid_dir, tmp_path / pid_dir.name)
    return tmp_path


def _fake(**scenario: Any) -> FakeNvml:
    return fake_gpus(
        3,
        processes={
            0: [FakeProcess(4101, 70_000, sm_pct=90), FakeProcess(GONE, 10)],
            1: [FakeProcess(4112, 512)],
            2: [],
        },
        **scenario,
    )


def _collector(fake: FakeNvml, proc: Path, **settings: Any) -> WorkloadCollector:
    collector = WorkloadCollector(Nvml(fake), ProcReader(proc), node="gpu01", **settings)
    collector.setup()
    return collector


def _by_gpu(workloads: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {entry["gpu"]: entry for entry in workloads}


def test_each_gpu_is_sent_with_its_processes_owners_and_sm_use(proc: Path) -> None:
    now = time.time()
    workloads = _by_gpu(_collector(_fake(), proc).read(now).workloads)
    assert sorted(workloads) == [0, 1, 2]
    (trainer,) = workloads[0]["processes"]  # the exited PID is left out
    assert trainer == {
        "pid": 4101,
        "memory_mib": 70_000.0,
        "sm_pct": 90.0,
        "owner": {
            "kind": "pod",
            "pod_uid": POD_UID,
            "container_id": trainer["owner"]["container_id"],
        },
    }
    assert workloads[1]["processes"][0]["owner"] == {"kind": "user", "uid": 0, "user": "root"}
    assert workloads[1]["processes"][0]["sm_pct"] == 0  # no sample: idle
    assert workloads[2] == {"ts": now, "gpu": 2, "allocation": None, "processes": []}


def test_the_part_is_read_on_the_slow_lane_every_ten_ticks_and_goes_into_the_batch(
    proc: Path,
) -> None:
    fake = _fake()
    collectors = CollectorSet([_collector(fake, proc, every_s=10.0)], interval_s=1.0)
    try:
        ticks = []
        for tick in range(11):
            ticks.append(collectors.collect(time.time(), tick))
            assert collectors.lane.wait_idle(5.0)
        ticks.append(collectors.collect(time.time(), 11))
    finally:
        collectors.close()
    sent = [tick for tick, reading in enumerate(ticks) if reading.workloads]
    # read at ticks 0 and 10 on the lane, each merged into the first reading that finds it
    # done: that tick's own when the read beats the harvest, else the next one's
    assert len(sent) == 2 and sent[0] in (0, 1) and sent[1] in (10, 11), sent
    threads = fake.stats.threads["nvmlDeviceGetComputeRunningProcesses"]
    assert all(name.startswith("slow-lane") for name in threads)
    batch = build_batch("node:gpu01", 1, ticks[sent[0]], {})
    assert len(validate_batch(batch, time.time()).workloads) == 3


def test_a_gpu_the_kubelet_allocated_shows_its_pod_even_with_nothing_running(
    proc: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = _fake()
    holder = podresources.PodRef("ml", "idle-notebook-0", "jupyter", "nvidia.com/gpu")
    asked: list[str] = []

    def allocations(socket_path: str, timeout_s: float = 2.0) -> dict[str, Any]:
        asked.append(socket_path)
        return {uuid: (holder,)}

    monkeypatch.setattr(podresources, "list_allocations", allocations)
    collector = _collector(fake, proc, pod_resources_socket="/run/kubelet.sock")
    uuid = collector.uuids[2]
    workloads = _by_gpu(collector.read(time.time()).workloads)
    assert asked == ["/run/kubelet.sock"]
    assert workloads[2]["allocation"] == {
        "kind": "pod",
        "namespace": "ml",
        "pod": "idle-notebook-0",
        "container": "jupyter",
    }
    assert workloads[2]["processes"] == []
    assert workloads[0]["allocation"] is None


def test_a_kubelet_that_cannot_be_asked_means_no_allocations_warned_once(
    proc: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def down(socket_path: str, timeout_s: float = 2.0) -> dict[str, Any]:
        raise podresources.PodResourcesUnavailable("kubelet down")

    monkeypatch.setattr(podresources, "list_allocations", down)
    collector = _collector(_fake(), proc, pod_resources_socket="/run/kubelet.sock")
    with caplog.at_level(logging.WARNING, logger="agents.collectors.workloads"):
        first = collector.read(time.time()).workloads
        collector.read(time.time())
    assert all(entry["allocation"] is None for entry in first)
    warned = [r for r in caplog.records if r.name == "agents.collectors.workloads"]
    assert len(warned) == 1 and "pod-resources" in warned[0].getMessage()


def test_a_slurm_jobs_gres_allocate_its_gpus_and_name_its_account(proc: Path) -> None:
    line = (
        "JobId=4243 UserId=alice(61001) Account=physics JobState=RUNNING "
        "Nodes=gpu01 CPU_IDs=0-7 Mem=1024 GRES=gpu:h200:2(IDX:1-2)"
    )

    def scontrol(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 0, line, "")

    fake = _fake()
    fake.processes[1] = [FakeProcess(4110, 1000, sm_pct=5)]
    collector = _collector(fake, proc, scontrol=Scontrol("scontrol", run=scontrol))
    workloads = _by_gpu(collector.read(time.time()).workloads)
    job = {"kind": "slurm", "job": "4243", "account": "physics", "user": "alice"}
    assert workloads[1]["processes"][0]["owner"] == {**job, "step": "batch"}
    assert workloads[1]["allocation"] == job
    assert workloads[2]["allocation"] == job  # held by the job, nothing running: the waste
    assert workloads[0]["allocation"] is None


def test_each_mig_device_is_its_own_entry_with_sm_use_unknown(proc: Path) -> None:
    fake = fake_gpus(1, mig={0: [MigInstance("3g.71gb", 1, 0, 71_000)] * 2})
    fake.processes[(0, 1)] = [FakeProcess(4112, 2048, sm_pct=50)]
    workloads = _collector(fake, proc).read(time.time()).workloads
    assert [len(entry["processes"]) for entry in workloads] == [0, 1]
    assert workloads[0]["mig"] != workloads[1]["mig"]
    assert workloads[1]["processes"][0]["sm_pct"] is None
    batch = build_batch("node:gpu01", 1, _collector(fake, proc).read(time.time()), {})
    validate_batch(batch, time.time())
