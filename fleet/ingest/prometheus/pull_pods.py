"""Who holds each pulled GPU, from the `pod`/`namespace`/`container` labels dcgm-exporter puts
on a GPU's series (it asks the kubelet's pod-resources API, as the agent does).

Each pull asks once which pod each GPU's series name (`pull_query.pod_query`); every node
with a GPU so named gets a `workloads` snapshot (fleet/storage/workloads.py) listing those
GPUs, each allocated to its pod, with source `exporter` and no processes (the exporter sees
none), stamped with its target's scrape time. The allocation intervals open, continue and
close as an agent's do: a GPU whose pod is gone from the labels ends its interval at the
node's next snapshot.

- Empty labels mean *unknown*, never *unallocated*: dcgm-exporter leaves them empty when
  its pod mapping fails (NVIDIA/dcgm-exporter#277, #188), so such a GPU is left out and a
  node none of whose GPUs is named sends no snapshot (its intervals stay open, known until
  their `last_seen`).
- A scrape that sets `pod`/`namespace`/`container` target labels of its own (Kubernetes
  service discovery, the Prometheus Operator) renames the exporter's to `exported_*`
  (NVIDIA/dcgm-exporter#356): those win where present, and the query leaves out a series
  whose pod is its scrape target's own (the exporter's pod, on a GPU nobody holds).
- A GPU time-shared by several pods has a series per pod: the first by namespace, pod and
  container stands for them, as on the agent. MIG instances (series with `GPU_I_ID`) carry
  no MIG device UUID to key them by: a GPU split into MIG instances is left out.
- A node whose own agent reports is left to the agent, as its samples are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fleet.ingest.prometheus.pull_match import GpuRef, Labels
from fleet.storage.workloads import EXPORTER, Snapshot, snapshots_of

POD_LABELS = ("namespace", "pod", "container")
EXPORTED = "exported_"  # Prometheus' prefix for a scraped label a target label displaced
MIG_LABEL = "GPU_I_ID"  # dcgm-exporter's GPU instance ID, on a MIG instance's series


def pod_owner(labels: Labels) -> dict[str, Any] | None:
    """The pod a series names, as a workloads owner; None where namespace or pod is empty."""
    prefix = EXPORTED if labels.get(f"{EXPORTED}pod") else ""
    namespace, pod = labels.get(f"{prefix}namespace"), labels.get(f"{prefix}pod")
    if not namespace or not pod:
        return None
    owner: dict[str, Any] = {"kind": "pod", "namespace": namespace, "pod": pod}
    container = labels.get(f"{prefix}container")
    if container:
        owner["container"] = container
    return owner


@dataclass
class NodePods:
    """One node's named GPUs in one pull."""

    ts: float = 0.0  # the newest scrape among its series: one snapshot time per node
    pods: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # GPU index → pods
    mig: set[int] = field(default_factory=set)  # GPUs split into MIG instances


@dataclass
class PodLabels:
    """The pods a pull's series name, per node, until they become snapshots."""

    nodes: dict[int, NodePods] = field(default_factory=dict)

    def add(self, ref: GpuRef, labels: Labels, ts: float) -> None:
        owner = pod_owner(labels)
        if owner is None:
            return
        node = self.nodes.setdefault(ref.node_id, NodePods())
        node.ts = max(node.ts, ts)
        node.pods.setdefault(ref.index, []).append(owner)
        if labels.get(MIG_LABEL):
            node.mig.add(ref.index)

    def snapshots(self, site_id: int) -> list[Snapshot]:
        """Each named node's snapshot: its named GPUs, each allocated to its pod."""
        out: list[Snapshot] = []
        for node_id, node in sorted(self.nodes.items()):
            entries = [
                {"ts": node.ts, "gpu": gpu, "allocation": min(owners, key=_order), "processes": []}
                for gpu, owners in sorted(node.pods.items())
                if gpu not in node.mig
            ]
            if entries:
                out.extend(snapshots_of(node_id, site_id, entries, allocated_by=EXPORTER))
        return out

    def gpus(self) -> int:
        return sum(len(set(n.pods) - n.mig) for n in self.nodes.values())


def _order(owner: dict[str, Any]) -> tuple[str, str, str]:
    return (owner["namespace"], owner["pod"], owner.get("container", ""))
