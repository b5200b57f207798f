"""Who a GPU process (or a GPU's allocation) belongs to, as the `workloads` part sends it.

Four kinds, most specific first: a Kubernetes pod, a Slurm job, a container without an
orchestrator, else the Unix user (docs/protocol.md, "`workloads`").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class PodOwner:
    """A Kubernetes pod: its UID and container ID from the cgroup path; its namespace, name and
    container name from the kubelet's pod-resources API (which knows names, not UIDs)."""

    pod_uid: str | None = None
    container_id: str | None = None
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None


@dataclass(frozen=True, slots=True)
class SlurmOwner:
    """A Slurm job: its numeric ID or its SLUID (Slurm 26.05+), the step, and from scontrol
    the job's user and account."""

    job: str
    step: str | None = None
    user: str | None = None
    account: str | None = None


@dataclass(frozen=True, slots=True)
class ContainerOwner:
    """A container a runtime started outside Kubernetes (Docker)."""

    container_id: str


@dataclass(frozen=True, slots=True)
class UserOwner:
    """No scheduler, no container: the process's real user."""

    uid: int
    user: str | None = None


Owner = PodOwner | SlurmOwner | ContainerOwner | UserOwner

_KINDS: dict[type, str] = {
    PodOwner: "pod",
    SlurmOwner: "slurm",
    ContainerOwner: "container",
    UserOwner: "user",
}


def as_wire(owner: Owner) -> dict[str, Any]:
    """The owner as the protocol's object: `kind` and the fields known, none sent as null."""
    wire: dict[str, Any] = {"kind": _KINDS[type(owner)]}
    for name in owner.__slots__:
        value = getattr(owner, name)
        if value is not None:
            wire[name] = value
    return wire
