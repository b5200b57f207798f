"""Recorded GPU-health sequences for the health record's tests: a site with GPUs, and the
three things an agent leaves behind — events (XIDs, gpu_lost), the latest state (through the
production write path) and the 1m/1h rollup rows a reset shows in (a counter going down)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fleet.models import GPU, Event, Hall, Node, Rack, Site
from tests.support.latest import store_latest
from tests.support.ledger_seed import insert

_seq = iter(range(1, 1_000_000))


@dataclass(frozen=True)
class Place:
    site: Site
    nodes: list[Node]
    gpus: list[GPU]


def site_with_gpus(
    slug: str = "s1", name: str = "Site 1", nodes: int = 1, per_node: int = 2
) -> Place:
    """A site with `nodes` nodes of `per_node` H100s each, serials and UUIDs known, a
    slowdown limit of 87 °C reported by the agent."""
    site = Site.objects.create(slug=slug, name=name)
    hall = Hall.objects.create(site=site, name="H1")
    rack = Rack.objects.create(hall=hall, name="A01", cooling="air", power_budget_kw=40)
    made_nodes, gpus = [], []
    for n in range(nodes):
        node = Node.objects.create(name=f"{slug}-gpu{n + 1:02d}", rack=rack)
        made_nodes.append(node)
        for i in range(per_node):
            info = {"serial": f"16523{n}{i:04d}", "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0"}
            gpus.append(
                GPU.objects.create(
                    node=node,
                    index=i,
                    model="NVIDIA H100 80GB HBM3",
                    uuid=f"GPU-{slug}-{n}-{i}",
                    info=info,
                    reported_slowdown_c=87.0,
                )
            )
    return Place(site, made_nodes, gpus)


def event(gpu: GPU, ts: float, kind: str = "xid", code: int | None = None) -> None:
    """An event from the GPU's node, as ingest stores it."""
    source = f"node:{gpu.node.name}"
    at = {"source": source, "seq": next(_seq), "pos": 0, "ts": ts, "node": gpu.node}
    Event.objects.create(**at, gpu_index=gpu.index, kind=kind, code=code, detail="")


def latest(gpu: GPU, at: float, **values: Any) -> None:
    store_latest("gpu", (gpu.node_id, gpu.index), at, **values)


def minutes(gpu: GPU, rows: Sequence[tuple[int, dict[str, float]]], tier: str = "1m") -> None:
    """Rollup rows of `tier` for the GPU: (bucket, {column: value}) — columns such as
    `energy_j_last` or `remap_pending_max`; a metric given as `name` sets its min, max and
    last alike."""
    for bucket, values in rows:
        cols: dict[str, float] = {}
        for name, value in values.items():
            if name.endswith(("_min", "_max", "_last", "_mean")):
                cols[name] = value
            else:
                cols.update({f"{name}_min": value, f"{name}_max": value, f"{name}_last": value})
        columns = ("node_id", "gpu", "bucket", "n", *cols)
        row = (gpu.node_id, gpu.index, bucket, 1, *cols.values())
        insert("default", f"fw_gpu_{tier}", columns, [row])


def counter_run(
    start: int, count: int, step: int = 60, held: dict[str, float] | None = None, **first: float
) -> list[tuple[int, dict[str, float]]]:
    """`count` buckets from `start` in which each counter given rises by 1,000 a bucket from
    its first value (an energy counter ticking over) and each of `held` stays as given."""
    return [
        (start + k * step, {**(held or {}), **{n: v + 1000.0 * k for n, v in first.items()}})
        for k in range(count)
    ]
