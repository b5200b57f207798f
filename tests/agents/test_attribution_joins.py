"""One pod, both names: the workloads collector joins a process's pod UID (its cgroup) to the
names the GPU's pod-resources allocation gives, and a Slurm job's processes and GRES
allocation carry the same user and account."""

from __future__ import annotations

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
from fleetsim.nvml_answers import FakeProcess
from tests.support.nvml_scenarios import fake_gpus

TRAINER_UID = "1f6a3c2e-9b4d-4e8a-a1c7-5d2f0e9b3a61"
OTHER_UID = "7c0d9e4b-2a1f-4b3c-9d8e-6f5a4b3c2d1e"
TRAINER_CID = "3b9f1c0d7a2e4f6b8c5d9e0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e"
OTHER_CID = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a29180716f5e4d3c2b1a0f9e8d7c6b5"


def _pod_cgroup(uid: str, container_id: str) -> str:
    slice_ = f"kubepods-burstable-pod{uid.replace('-', '_')}.slice"
    return f"/kubepods.slice/kubepods-burstable.slice/{slice_}/cri-containerd-{container_id}.scope"


def _proc(root: Path, processes: dict[int, tuple[str, int]]) -> ProcReader:
    """A /proc tree holding each PID's cgroup path and real UID."""
    for pid, (cgroup, uid) in processes.items():
        (root / str(pid)).mkdir()
        (root / str(pid) / "cgroup").write_text(f"0::{cgroup}\n")
        status = f"Name:\tpython\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
        (root / str(pid) / "status").write_text(status)
    return ProcReader(root)


def _ref(pod: str, container: str = "main", namespace: str = "ml") -> podresources.PodRef:
    return podresources.PodRef(namespace, pod, container, "nvidia.com/gpu")


def _read(
    procs: ProcReader,
    monkeypatch: pytest.MonkeyPatch,
    processes: dict[int, list[FakeProcess]],
    holders: dict[int, tuple[podresources.PodRef, ...]],
) -> dict[int, dict[str, Any]]:
    """One snapshot of len(processes) GPUs whose pod-resources holders are `holders`."""
    fake = fake_gpus(len(processes), processes=processes)
    collector = WorkloadCollector(
        Nvml(fake), procs, node="gpu01", pod_resources_socket="/run/kubelet.sock"
    )
    collector.setup()
    by_uuid = {collector.uuids[gpu]: refs for gpu, refs in holders.items()}
    monkeypatch.setattr(podresources, "list_allocations", lambda *_a, **_k: by_uuid)
    return {e["gpu"]: e for e in collector.read(time.time()).workloads}


def _one_process_on_each_of_two_gpus(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    first: tuple[str, str],
    second: tuple[str, str],
    allocations: dict[int, tuple[podresources.PodRef, ...]],
) -> dict[int, dict[str, Any]]:
    """PID 4101 of pod `first` (UID, container ID) on GPU 0, PID 4102 of `second` on GPU 1."""
    procs = _proc(tmp_path, {4101: (_pod_cgroup(*first), 0), 4102: (_pod_cgroup(*second), 0)})
    return _read(
        procs,
        monkeypatch,
        {0: [FakeProcess(4101, 1000)], 1: [FakeProcess(4102, 1000)]},
        allocations,
    )


def test_a_pods_processes_carry_its_names_and_its_allocations_carry_its_uid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    procs = _proc(tmp_path, {4101: (_pod_cgroup(TRAINER_UID, TRAINER_CID), 0)})
    gpus = _read(
        procs,
        monkeypatch,
        {0: [FakeProcess(4101, 70_000)], 1: []},
        {0: (_ref("trainer-0"),), 1: (_ref("trainer-0"),)},
    )
    pod = {"kind": "pod", "namespace": "ml", "pod": "trainer-0", "pod_uid": TRAINER_UID}
    assert gpus[0]["processes"][0]["owner"] == pod | {
        "container": "main",
        "container_id": TRAINER_CID,
    }
    assert gpus[0]["allocation"] == pod | {"container": "main"}
    # Allocated, nothing running: the same pod, UID included, as learned from GPU 0.
    assert gpus[1]["allocation"] == pod | {"container": "main"}


def test_a_joined_pods_process_on_a_gpu_it_was_not_given_is_still_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpus = _one_process_on_each_of_two_gpus(
        tmp_path,
        monkeypatch,
        (TRAINER_UID, TRAINER_CID),
        (TRAINER_UID, TRAINER_CID),
        {0: (_ref("trainer-0"),)},
    )
    assert gpus[1]["allocation"] is None
    assert gpus[1]["processes"][0]["owner"]["pod"] == "trainer-0"


def test_a_gpu_time_shared_by_two_pods_names_neither_pods_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    procs = _proc(
        tmp_path,
        {
            4101: (_pod_cgroup(TRAINER_UID, TRAINER_CID), 0),
            4102: (_pod_cgroup(OTHER_UID, OTHER_CID), 0),
        },
    )
    gpus = _read(
        procs,
        monkeypatch,
        {0: [FakeProcess(4101, 1000), FakeProcess(4102, 1000)]},
        {0: (_ref("infer-a"), _ref("infer-b"))},
    )
    owners = [p["owner"] for p in gpus[0]["processes"]]
    assert {o["pod_uid"] for o in owners} == {TRAINER_UID, OTHER_UID}
    assert all("pod" not in o for o in owners)
    assert "pod_uid" not in gpus[0]["allocation"]


def test_a_uid_two_gpus_name_differently_is_joined_to_neither(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod that sees a GPU it was not given (NVIDIA_VISIBLE_DEVICES=all) is not taken for
    the pod that was given it, at least where two GPUs disagree on who it is."""
    gpus = _one_process_on_each_of_two_gpus(
        tmp_path,
        monkeypatch,
        (TRAINER_UID, TRAINER_CID),
        (TRAINER_UID, TRAINER_CID),
        {0: (_ref("trainer-0"),), 1: (_ref("notebook-3"),)},
    )
    for gpu in (0, 1):
        assert "pod" not in gpus[gpu]["processes"][0]["owner"]
        assert "pod_uid" not in gpus[gpu]["allocation"]


def test_a_pod_name_two_uids_claim_is_joined_to_neither(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A StatefulSet's pod recreated under its name while the old one's process exits."""
    gpus = _one_process_on_each_of_two_gpus(
        tmp_path,
        monkeypatch,
        (TRAINER_UID, TRAINER_CID),
        (OTHER_UID, OTHER_CID),
        {0: (_ref("db-0"),), 1: (_ref("db-0"),)},
    )
    assert all("pod" not in gpus[g]["processes"][0]["owner"] for g in (0, 1))
    assert all("pod_uid" not in gpus[g]["allocation"] for g in (0, 1))


def test_a_container_name_joins_only_where_the_gpu_was_given_to_one_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    procs = _proc(tmp_path, {4101: (_pod_cgroup(TRAINER_UID, TRAINER_CID), 0)})
    gpus = _read(
        procs,
        monkeypatch,
        {0: [FakeProcess(4101, 1000)]},
        {0: (_ref("trainer-0", "main"), _ref("trainer-0", "sidecar"))},
    )
    owner = gpus[0]["processes"][0]["owner"]
    assert owner["pod"] == "trainer-0" and "container" not in owner
    assert gpus[0]["allocation"]["pod_uid"] == TRAINER_UID


def test_a_slurm_jobs_processes_and_allocation_carry_schedulers_user_and_account(
    tmp_path: Path,
) -> None:
    """The process runs as a UID this host names otherwise (root here): the job's user is
    scontrol's on both sides."""
    job_path = "/system.slice/slurmstepd.scope/job_4243/step_0/user/task_0"
    procs = _proc(tmp_path, {4110: (job_path, 0)})
    line = (
        "JobId=4243 UserId=alice(61001) Account=physics JobState=RUNNING "
        "Nodes=gpu01 GRES=gpu:h200:2(IDX:0-1)"
    )

    def scontrol(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 0, line, "")

    fake = fake_gpus(2, processes={0: [FakeProcess(4110, 1000)], 1: []})
    collector = WorkloadCollector(
        Nvml(fake), procs, node="gpu01", scontrol=Scontrol("scontrol", run=scontrol)
    )
    collector.setup()
    gpus = {e["gpu"]: e for e in collector.read(time.time()).workloads}
    process = gpus[0]["processes"][0]["owner"]
    job = {"kind": "slurm", "job": "4243", "user": "alice", "account": "physics"}
    assert process == job | {"step": "0"}
    assert gpus[0]["allocation"] == gpus[1]["allocation"] == job
