"""Which pods hold each GPU, read from a kubelet's pod-resources socket.

The kubelet here is a real gRPC server on a unix socket, built from the same generated
stubs the agent uses, answering what NVIDIA's device plugin and DRA driver report."""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

from agents.attribution.podresources import PodRef, PodResourcesUnavailable, list_allocations
from agents.attribution.proto import podresources_pb2 as pb
from agents.attribution.proto import podresources_pb2_grpc as pb_grpc

GPU_A = "GPU-0a1b2c3d-0000-1111-2222-333344445555"
GPU_B = "GPU-9f8e7d6c-0000-1111-2222-333344445555"
MIG_1 = "MIG-11111111-2222-3333-4444-555555555555"
MIG_2 = "MIG-66666666-7777-8888-9999-000000000000"


def pod(namespace: str, name: str, *containers: pb.ContainerResources) -> pb.PodResources:
    return pb.PodResources(namespace=namespace, name=name, containers=containers)


def container(name: str, resource: str, *device_ids: str) -> pb.ContainerResources:
    devices = [pb.ContainerDevices(resource_name=resource, device_ids=device_ids)]
    return pb.ContainerResources(name=name, devices=devices)


class FakeKubelet(pb_grpc.PodResourcesListerServicer):
    """Answers `List` with `pods`; holds each answer until `release` is set."""

    def __init__(self) -> None:
        self.pods: list[pb.PodResources] = []
        self.release = threading.Event()
        self.release.set()

    def List(self, request: pb.ListPodResourcesRequest, context: Any) -> Any:
        self.release.wait(timeout=10)
        return pb.ListPodResourcesResponse(pod_resources=self.pods)


@pytest.fixture
def kubelet_socket(tmp_path: Path) -> Iterator[tuple[FakeKubelet, str]]:
    kubelet = FakeKubelet()
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_PodResourcesListerServicer_to_server(kubelet, server)
    path = str(tmp_path / "kubelet.sock")
    server.add_insecure_port(f"unix://{path}")
    server.start()
    yield kubelet, path
    kubelet.release.set()
    server.stop(grace=None)


def test_whole_gpus_map_to_the_containers_holding_them(
    kubelet_socket: tuple[FakeKubelet, str],
) -> None:
    kubelet, path = kubelet_socket
    kubelet.pods = [
        pod("ml", "trainer-0", container("main", "nvidia.com/gpu", GPU_A, GPU_B)),
    ]

    assert list_allocations(f"unix://{path}") == {
        GPU_A: (PodRef("ml", "trainer-0", "main", "nvidia.com/gpu"),),
        GPU_B: (PodRef("ml", "trainer-0", "main", "nvidia.com/gpu"),),
    }


def test_mig_devices_are_keyed_by_their_own_uuid(kubelet_socket: tuple[FakeKubelet, str]) -> None:
    kubelet, path = kubelet_socket
    kubelet.pods = [
        pod("inference", "small", container("server", "nvidia.com/mig-1g.10gb", MIG_1)),
        pod("inference", "large", container("server", "nvidia.com/mig-3g.40gb", MIG_2)),
    ]

    assert list_allocations(path) == {
        MIG_1: (PodRef("inference", "small", "server", "nvidia.com/mig-1g.10gb"),),
        MIG_2: (PodRef("inference", "large", "server", "nvidia.com/mig-3g.40gb"),),
    }


def test_a_time_sliced_gpu_lists_every_pod_sharing_it_under_its_uuid(
    kubelet_socket: tuple[FakeKubelet, str],
) -> None:
    kubelet, path = kubelet_socket
    kubelet.pods = [
        pod("dev", "notebook-b", container("jupyter", "nvidia.com/gpu", f"{GPU_A}::1")),
        pod("dev", "notebook-a", container("jupyter", "nvidia.com/gpu", f"{GPU_A}::0")),
        # two replicas of the same GPU in one container: still one holder
        pod("dev", "greedy", container("main", "nvidia.com/gpu", f"{GPU_B}::2", f"{GPU_B}::3")),
    ]

    allocations = list_allocations(path)

    assert allocations[GPU_A] == (
        PodRef("dev", "notebook-a", "jupyter", "nvidia.com/gpu"),
        PodRef("dev", "notebook-b", "jupyter", "nvidia.com/gpu"),
    )
    assert allocations[GPU_B] == (PodRef("dev", "greedy", "main", "nvidia.com/gpu"),)
    assert set(allocations) == {GPU_A, GPU_B}


def test_devices_that_are_not_nvidia_gpus_are_left_out(
    kubelet_socket: tuple[FakeKubelet, str],
) -> None:
    kubelet, path = kubelet_socket
    kubelet.pods = [
        pod("net", "router", container("main", "intel.com/sriov_netdevice", "0000:3b:02.1")),
        pod("kube-system", "coredns", pb.ContainerResources(name="coredns")),
        pod(
            "ml",
            "trainer-0",
            pb.ContainerResources(
                name="main",
                devices=[
                    pb.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=[GPU_A]),
                    pb.ContainerDevices(resource_name="rdma/hca_shared", device_ids=["mlx5_0"]),
                ],
            ),
        ),
    ]

    assert list_allocations(path) == {GPU_A: (PodRef("ml", "trainer-0", "main", "nvidia.com/gpu"),)}


def test_dra_gpus_are_keyed_by_driver_pool_and_device_name(
    kubelet_socket: tuple[FakeKubelet, str],
) -> None:
    kubelet, path = kubelet_socket
    claim = pb.DynamicResource(
        claim_name="trainer-gpu",
        claim_namespace="ml",
        claim_resources=[
            pb.ClaimResource(driver_name="gpu.nvidia.com", pool_name="node-7", device_name="gpu-0"),
            pb.ClaimResource(driver_name="nic.example", pool_name="node-7", device_name="nic-1"),
        ],
    )
    kubelet.pods = [
        pod("ml", "trainer-0", pb.ContainerResources(name="main", dynamic_resources=[claim]))
    ]

    assert list_allocations(path) == {
        "gpu.nvidia.com/node-7/gpu-0": (PodRef("ml", "trainer-0", "main", "gpu.nvidia.com"),)
    }


def test_a_node_without_the_socket_says_to_mount_its_directory(tmp_path: Path) -> None:
    with pytest.raises(PodResourcesUnavailable, match=r"no kubelet pod-resources socket.*mount"):
        list_allocations(str(tmp_path / "pod-resources" / "kubelet.sock"))


def test_a_kubelet_that_is_down_is_a_typed_error(tmp_path: Path) -> None:
    # what a stopped kubelet leaves behind: the socket file, and nobody listening on it
    path = tmp_path / "kubelet.sock"
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(path))

    started = time.monotonic()
    with pytest.raises(PodResourcesUnavailable, match="not answering"):
        list_allocations(str(path), timeout_s=2.0)
    assert time.monotonic() - started < 2.0


def test_a_kubelet_that_does_not_answer_in_time_is_a_timeout_error(
    kubelet_socket: tuple[FakeKubelet, str],
) -> None:
    kubelet, path = kubelet_socket
    kubelet.release.clear()

    started = time.monotonic()
    with pytest.raises(PodResourcesUnavailable, match=r"did not answer .* within 0.2 s"):
        list_allocations(path, timeout_s=0.2)
    assert time.monotonic() - started < 1.0


def test_without_grpcio_the_error_names_the_extra_to_install(
    kubelet_socket: tuple[FakeKubelet, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, path = kubelet_socket
    monkeypatch.setitem(sys.modules, "grpc", None)  # what `import grpc` finds when absent

    with pytest.raises(PodResourcesUnavailable, match=r"fleetwatch-agent\[kubernetes\]"):
        list_allocations(path)
