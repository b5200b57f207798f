"""Which pods hold each NVIDIA GPU on this node, as the kubelet allocated them.

One call of the kubelet's pod-resources API, `v1.PodResourcesLister/List`, over its unix
socket (kubernetes.io blog "Kubernetes 1.28: Node podresources API Graduates to GA"). The
answer names pods by namespace and name only: no pod UID, no container ID.

Device plugins (`ContainerDevices`): every resource whose name starts with `nvidia.com/`.
NVIDIA's device plugin reports a whole GPU as `GPU-<uuid>` and a MIG device as `MIG-<uuid>`,
the UUIDs NVML reports; a time-sliced or MPS replica is `<uuid>::<replica>`
(NVIDIA/k8s-device-plugin, `internal/rm/device_map.go`), so the suffix is stripped and
the pods sharing that GPU all appear under its UUID.

Dynamic Resource Allocation (`dynamic_resources[].claim_resources[]`, driver
`gpu.nvidia.com`): the kubelet reports the device as the DRA driver named it in its
ResourceSlice (pool and device name, e.g. `gpu-0`), not as a UUID. Those are keyed
`gpu.nvidia.com/<pool>/<device>`, the name the DRA API itself gives an allocated device,
so they never pass for a UUID; joining them to NVML needs that ResourceSlice from the API
server, which this module does not read.

grpcio and protobuf come with the extra `fleetwatch-agent[kubernetes]`; they are imported
only when `list_allocations` runs, so the agent works without them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agents.attribution.proto import podresources_pb2

DEFAULT_SOCKET = "unix:///var/lib/kubelet/pod-resources/kubelet.sock"
DEVICE_PLUGIN_PREFIX = "nvidia.com/"
DRA_DRIVER = "gpu.nvidia.com"
REPLICA_SEPARATOR = "::"
# The answer lists every pod of the node: leave room beyond gRPC's default limit of 4 MiB.
MAX_ANSWER_BYTES = 16 * 1024 * 1024


class PodResourcesUnavailable(Exception):
    """The kubelet's pod-resources API could not be read; the message says why."""


@dataclass(frozen=True, order=True)
class PodRef:
    """One container the kubelet gave a device to, through `resource_name`."""

    namespace: str
    pod: str
    container: str
    resource_name: str


# device id (GPU or MIG UUID, or a DRA device name) -> its holders, sorted
Allocations = dict[str, tuple[PodRef, ...]]


def list_allocations(socket_path: str = DEFAULT_SOCKET, timeout_s: float = 2.0) -> Allocations:
    """The NVIDIA devices allocated on this node and the containers holding each.

    `socket_path` is a path or a `unix://` target. Raises `PodResourcesUnavailable` when
    the socket is missing, the kubelet does not answer within `timeout_s`, or grpcio is
    not installed."""
    return gpu_allocations(_list_pod_resources(_socket_file(socket_path), timeout_s))


def gpu_allocations(answer: podresources_pb2.ListPodResourcesResponse) -> Allocations:
    """Device id -> the containers holding it, from one `List` answer."""
    holders: dict[str, set[PodRef]] = {}
    for device_id, holder in _gpu_holders(answer):
        holders.setdefault(device_id, set()).add(holder)
    return {device_id: tuple(sorted(refs)) for device_id, refs in holders.items()}


def _gpu_holders(answer: podresources_pb2.ListPodResourcesResponse) -> Iterator[tuple[str, PodRef]]:
    for pod in answer.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if devices.resource_name.startswith(DEVICE_PLUGIN_PREFIX):
                    ref = PodRef(pod.namespace, pod.name, container.name, devices.resource_name)
                    for device_id in devices.device_ids:
                        yield device_id.split(REPLICA_SEPARATOR, 1)[0], ref
            for claim in container.dynamic_resources:
                for device in claim.claim_resources:
                    if device.driver_name == DRA_DRIVER:
                        ref = PodRef(pod.namespace, pod.name, container.name, DRA_DRIVER)
                        yield f"{DRA_DRIVER}/{device.pool_name}/{device.device_name}", ref


def _socket_file(socket_path: str) -> str:
    path = socket_path.removeprefix("unix://")
    if not os.path.exists(path):
        raise PodResourcesUnavailable(
            f"no kubelet pod-resources socket at {path}: mount the host's "
            f"{os.path.dirname(path)} directory into the agent (the directory, not the file)"
        )
    return os.path.abspath(path)


def _list_pod_resources(path: str, timeout_s: float) -> podresources_pb2.ListPodResourcesResponse:
    try:
        import grpc

        from agents.attribution.proto import podresources_pb2, podresources_pb2_grpc
    except (ImportError, RuntimeError) as error:  # RuntimeError: a grpcio older than the stubs
        raise PodResourcesUnavailable(
            f"reading the kubelet's pod resources needs grpcio and protobuf ({error}): "
            "install fleetwatch-agent[kubernetes]"
        ) from error
    options = [("grpc.max_receive_message_length", MAX_ANSWER_BYTES)]
    with grpc.insecure_channel(f"unix://{path}", options=options) as channel:
        stub = podresources_pb2_grpc.PodResourcesListerStub(channel)
        try:
            answer: podresources_pb2.ListPodResourcesResponse = stub.List(
                podresources_pb2.ListPodResourcesRequest(), timeout=timeout_s
            )
        except grpc.RpcError as error:
            raise PodResourcesUnavailable(_failure(error, path, timeout_s)) from error
    return answer


def _failure(error: Any, path: str, timeout_s: float) -> str:
    """Why a `List` call failed, in words; `error` is a grpc.RpcError (also a grpc.Call)."""
    code = error.code().name
    if code == "DEADLINE_EXCEEDED":
        return f"the kubelet did not answer on {path} within {timeout_s:g} s"
    if code == "UNAVAILABLE":
        return f"the kubelet is not answering on {path} (is it running?): {error.details()}"
    if code == "UNIMPLEMENTED":
        return f"the kubelet on {path} does not serve v1.PodResourcesLister/List"
    return f"pod-resources List on {path} failed: {code}: {error.details()}"
