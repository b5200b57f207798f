"""Which GPU of the inventory a dcgm-exporter series is about.

By `UUID` first (fleet.models.GPU.uuid: the GPU itself, wherever the labels say it is),
then by the node the labels name (the source's host labels in order, then `instance` via
the source's map, or its host part when that is a node name) plus the `gpu` index.
Kubernetes labels (`pod`, `namespace`, `container`) come and go with pods and never
take part. Only the source's own site is searched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fleet.health.thresholds import STALE_AFTER_S
from fleet.models import GPU, PrometheusSource, SourceToken

Labels = dict[str, str]


@dataclass(frozen=True, slots=True)
class GpuRef:
    gpu_id: int
    node_id: int
    index: int


@dataclass
class Matcher:
    host_labels: tuple[str, ...]
    instance_map: dict[str, str]
    site_id: int = 0  # the source's site, which its workloads snapshots belong to
    by_uuid: dict[str, GpuRef] = field(default_factory=dict)
    by_node_index: dict[tuple[str, int], GpuRef] = field(default_factory=dict)
    node_names: set[str] = field(default_factory=set)
    agent_nodes: set[int] = field(default_factory=set)  # nodes whose own agent is live

    def match(self, labels: Labels) -> GpuRef | str:
        """The GPU, or why none (the reason the admin shows)."""
        uuid = labels.get("UUID") or labels.get("uuid")
        if uuid:
            ref = self.by_uuid.get(uuid)
            if ref is not None:
                return ref
        host = self.host_of(labels)
        if host is None:
            return "no host label and no known UUID"
        if host not in self.node_names:
            return f"host {host} is not a node of this site"
        index = _index(labels.get("gpu"))
        if index is None:
            return f"host {host}: no usable gpu label"
        ref = self.by_node_index.get((host, index))
        if ref is None:
            return f"node {host} has no GPU {index} in the inventory"
        return ref

    def host_of(self, labels: Labels) -> str | None:
        """The node name the labels give (lower case), or None."""
        for name in self.host_labels:
            value = labels.get(name)
            if value:
                return value.lower()
        instance = labels.get("instance")
        if not instance:
            return None
        mapped = self.instance_map.get(instance) or self.instance_map.get(_host_part(instance))
        return (mapped or _host_part(instance)).lower()


def identity(labels: Labels, host: str | None) -> str:
    """What one unmatched GPU is called, whatever pod holds it."""
    uuid = labels.get("UUID") or labels.get("uuid") or "-"
    return f"{host or labels.get('instance', '-')}/gpu{labels.get('gpu', '-')}/{uuid}"[:300]


def load_matcher(source: PrometheusSource, now: float) -> Matcher:
    """The site's GPUs by UUID and by (node name, index), and its live agents."""
    hosts = tuple(h.strip() for h in source.host_labels.split(",") if h.strip())
    mapping = source.instance_map if isinstance(source.instance_map, dict) else {}
    matcher = Matcher(hosts, {str(k): str(v) for k, v in mapping.items()}, source.site_id)
    rows = GPU.objects.filter(node__rack__hall__site=source.site_id).values_list(
        "id", "node_id", "index", "uuid", "node__name"
    )
    for gpu_id, node_id, index, uuid, node_name in rows:
        ref = GpuRef(gpu_id, node_id, index)
        if uuid:
            matcher.by_uuid[uuid] = ref
        name = node_name.lower()
        matcher.node_names.add(name)
        matcher.by_node_index[(name, index)] = ref
    matcher.agent_nodes = live_agent_nodes(source, now)
    return matcher


def live_agent_nodes(source: PrometheusSource, now: float) -> set[int]:
    """Nodes whose own agent sent a batch within the freshness window: the agent wins."""
    live = SourceToken.objects.filter(
        site_id=source.site_id,
        kind="node",
        revoked=False,
        last_seen__gte=now - STALE_AFTER_S,
    ).values_list("source", flat=True)
    names = {s.split(":", 1)[1] for s in live}
    if not names:
        return set()
    return set(
        GPU.objects.filter(node__name__in=names, node__rack__hall__site=source.site_id)
        .values_list("node_id", flat=True)
        .distinct()
    )


def _host_part(instance: str) -> str:
    """`10.0.3.17:9400` → `10.0.3.17`; `[fe80::1]:9400` → `fe80::1`."""
    if instance.startswith("["):
        return instance[1:].split("]", 1)[0]
    return instance.rsplit(":", 1)[0] if instance.count(":") == 1 else instance


def _index(value: str | None) -> int | None:
    if value is None or not value.isdigit():
        return None
    index = int(value)
    return index if index <= 1023 else None
