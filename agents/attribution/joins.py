"""One pod, both names: a process's pod UID joined to the names its GPU's allocation gives.

A process's cgroup names its pod by UID and container ID only (agents/attribution/cgroups.py);
the kubelet's pod-resources answer names the pod that holds a GPU by namespace, pod and
container only (agents/attribution/podresources.py). Sent as they are, the server keys the
allocation `namespace/pod` and the processes by UID: one pod, two workloads.

Where a GPU (or MIG device) is held by a single pod and every pod process on it carries the
same UID, that UID is the pod's; where the allocation also names one container and those
processes share one container ID, that ID is the container's. What one GPU shows holds for
the whole node, so every process of that UID gets the names and every allocation of that pod
gets the UID. A UID that two GPUs name differently (or a pod name two UIDs claim, as when a
StatefulSet's pod is recreated under the same name while the old one still exits) is
ambiguous and joins nothing. A time-shared GPU held by several pods names nobody: which of
its processes is whose, the node cannot tell.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agents.attribution.owners import Owner, PodOwner

PodName = tuple[str, str]  # (namespace, pod)


@dataclass(frozen=True, slots=True)
class Held:
    """One GPU or MIG device: the one pod the kubelet gave it to (None: none, or several),
    and the owners of the processes running on it."""

    sole: PodOwner | None
    owners: Sequence[Owner]


@dataclass(slots=True)
class Joins:
    """What this node's GPUs show: pod UID -> names, container ID -> container name."""

    pods: dict[str, PodName] = field(default_factory=dict)
    containers: dict[str, str] = field(default_factory=dict)
    uids: dict[PodName, str] = field(default_factory=dict)  # the reverse of `pods`

    def named(self, owner: Owner) -> Owner:
        """A process's pod owner with the names its UID was joined to (else unchanged)."""
        if not isinstance(owner, PodOwner) or owner.pod_uid not in self.pods:
            return owner
        namespace, pod = self.pods[owner.pod_uid]
        container = self.containers.get(owner.container_id or "", owner.container)
        return replace(owner, namespace=namespace, pod=pod, container=container)

    def with_uid(self, allocation: Owner | None) -> Owner | None:
        """An allocation's pod with the UID its processes showed (else unchanged)."""
        if not isinstance(allocation, PodOwner) or allocation.pod_uid:
            return allocation
        uid = self.uids.get((allocation.namespace or "", allocation.pod or ""))
        return allocation if uid is None else replace(allocation, pod_uid=uid)


def sole_pod(refs: Any) -> PodOwner | None:
    """The one pod a GPU's pod-resources holders (PodRefs) name, with its container when
    they name one; None when they name no pod or several (a time-shared GPU)."""
    if refs is None:
        return None
    listed = refs if isinstance(refs, (tuple, list)) else (refs,)
    pods = {(str(r.namespace), str(r.pod)) for r in listed}
    if len(pods) != 1:
        return None
    ((namespace, pod),) = pods
    containers = {str(r.container) for r in listed}
    container = next(iter(containers)) if len(containers) == 1 else None
    return PodOwner(namespace=namespace, pod=pod, container=container)


def join(held: Iterable[Held]) -> Joins:
    """The node's joins from each GPU's sole pod and the pod UIDs of its processes."""
    pods, containers = _observed(held)
    claims: dict[PodName, set[str]] = {}
    for uid, names in pods.items():
        if len(names) == 1:
            claims.setdefault(next(iter(names)), set()).add(uid)
    joins = Joins()
    for name, claimants in claims.items():
        if len(claimants) == 1:
            (uid,) = claimants
            joins.pods[uid] = name
            joins.uids[name] = uid
    joins.containers = {cid: next(iter(c)) for cid, c in containers.items() if len(c) == 1}
    return joins


def _observed(held: Iterable[Held]) -> tuple[dict[str, set[PodName]], dict[str, set[str]]]:
    """Every (pod UID -> pod name) and (container ID -> container name) a GPU shows, where
    the kubelet gave it one pod and its pod processes carry one UID (and one container ID)."""
    pods: dict[str, set[PodName]] = {}
    containers: dict[str, set[str]] = {}
    for gpu in held:
        if gpu.sole is None:
            continue
        mine = [o for o in gpu.owners if isinstance(o, PodOwner) and o.pod_uid]
        uids = {str(o.pod_uid) for o in mine}
        if len(uids) != 1:
            continue  # nothing running, or several pods on a GPU the kubelet gave one
        name = (gpu.sole.namespace or "", gpu.sole.pod or "")
        pods.setdefault(uids.pop(), set()).add(name)
        ids = {o.container_id for o in mine}
        only = ids.pop() if len(ids) == 1 else None
        if gpu.sole.container and only:
            containers.setdefault(only, set()).add(gpu.sole.container)
    return pods, containers
