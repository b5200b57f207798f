"""Who owns a GPU process, read from recorded `/proc` trees of each cgroup shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.attribution.cgroups import ProcReader, cgroup_path, owner_from_path, real_uid
from agents.attribution.owners import ContainerOwner, PodOwner, SlurmOwner, UserOwner, as_wire

PROC = Path(__file__).resolve().parents[1] / "data" / "proc"
POD_UID = "1f6a3c2e-9b4d-4e8a-a1c7-5d2f0e9b3a61"
CONTAINER = "3b9f1c0d7a2e4f6b8c5d9e0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e"
DOCKER = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a29180716f5e4d3c2b1a0f9e8d7c6b5"


def _owner(shape: str) -> object:
    tree = PROC / shape
    (pid,) = (int(p.name) for p in tree.iterdir())
    return ProcReader(tree).owner(pid)


@pytest.mark.parametrize(
    "shape",
    [
        "systemd-containerd-burstable",
        "systemd-containerd-besteffort",
        "systemd-containerd-guaranteed",
        "systemd-crio",
        "cgroupfs-containerd",
        "cgroupfs-crio",
    ],
)
def test_a_kubernetes_container_is_named_by_pod_uid_and_container_id(shape: str) -> None:
    assert _owner(shape) == PodOwner(pod_uid=POD_UID, container_id=CONTAINER)


@pytest.mark.parametrize("shape", ["docker-systemd", "docker-cgroupfs"])
def test_a_docker_container_without_kubernetes_is_a_container(shape: str) -> None:
    assert _owner(shape) == ContainerOwner(DOCKER)


def test_a_slurm_v1_task_names_its_job_and_step() -> None:
    assert _owner("slurm-v1") == SlurmOwner(job="4242", step="0")


def test_a_slurm_v2_batch_step_names_its_job() -> None:
    assert _owner("slurm-v2-job") == SlurmOwner(job="4243", step="batch")


def test_a_slurm_26_05_sluid_directory_is_the_job_and_a_het_step_keeps_its_component() -> None:
    assert _owner("slurm-v2-sluid") == SlurmOwner(job="sEKNKTV3WPV500", step="0+1")


def test_a_plain_process_belongs_to_its_real_user_named_where_the_host_knows_it() -> None:
    assert _owner("user") == UserOwner(uid=0, user="root")
    assert as_wire(UserOwner(uid=61001)) == {"kind": "user", "uid": 61001}


def test_a_process_whose_cgroup_was_removed_still_names_its_pod() -> None:
    assert _owner("deleted") == PodOwner(pod_uid=POD_UID, container_id=CONTAINER)


def test_a_pid_that_exited_before_the_read_is_skipped_not_an_error() -> None:
    assert ProcReader(PROC / "user").owner(999_999) is None


def test_the_v1_memory_line_wins_over_systemds_own_line_on_a_hybrid_host() -> None:
    text = (PROC / "cgroupfs-containerd" / "4105" / "cgroup").read_text()
    assert "0::/system.slice/containerd.service" in text
    assert cgroup_path(text) == f"/kubepods/burstable/pod{POD_UID}/{CONTAINER}"


def test_a_cpu_cpuacct_line_serves_when_there_is_no_memory_line() -> None:
    assert cgroup_path("4:cpu,cpuacct:/docker/abc\n1:name=systemd:/init.scope\n") == "/docker/abc"


def test_a_pod_cgroup_itself_names_the_pod_without_a_container() -> None:
    path = f"/kubepods.slice/kubepods-pod{POD_UID.replace('-', '_')}.slice"
    assert owner_from_path(path) == PodOwner(pod_uid=POD_UID)


def test_job_directories_outside_slurm_and_pod_names_outside_kubepods_are_nobodys() -> None:
    assert owner_from_path("/user.slice/job_12/step_0") is None
    assert owner_from_path(f"/system.slice/pod{POD_UID}") is None


def test_a_status_without_a_uid_line_has_no_uid() -> None:
    assert real_uid("Name:\tx\nUid:\t1000\t0\t0\t0\n") == 1000
    assert real_uid("Name:\tx\n") is None


def test_owners_go_on_the_wire_with_their_kind_and_without_nulls() -> None:
    assert as_wire(SlurmOwner(job="7", account="physics")) == {
        "kind": "slurm",
        "job": "7",
        "account": "physics",
    }
    assert as_wire(PodOwner(pod_uid=POD_UID)) == {"kind": "pod", "pod_uid": POD_UID}
