"""The inventory bench/rules.py evaluates, which other benches borrow: one site of 500
direct-liquid racks (two feeds each) on 20 CDUs, 1,250 nodes × 8 H200s with their limits,
a source token per agent, and a day of benign XID events.

Benches scale it by setting RACKS, LOOPS and NODES on this module before `build_inventory`,
so code that must follow them reads them from the module at call time."""

from __future__ import annotations

import hashlib
import random
import time
from dataclasses import dataclass, field
from typing import Any

RACKS, LOOPS, NODES, GPUS_PER_NODE = 500, 20, 1250, 8
RACKS_PER_LOOP = RACKS // LOOPS  # 25
HALLS = ("Hall A", "Hall B", "Hall C", "Hall D")
SLUG = "bench"
RACK_BUDGET_KW = 40.0
SLOWDOWN_C, SHUTDOWN_C, GPU_MAX_C, MEM_MAX_C, POWER_MAX_W = 87.0, 92.0, 85.0, 95.0, 700.0


@dataclass
class Inventory:
    site_id: int
    racks: list[int]  # rack ids, in plan order
    loops: list[int]
    feeds: list[tuple[int, int]]  # (feed id, rack id)
    nodes: list[int]  # node ids, in plan order
    node_rack: dict[int, int] = field(default_factory=dict)


def nodes_in_rack(rack_index: int) -> int:
    """2 or 3 nodes per rack: 250 × 3 + 250 × 2 = 1,250."""
    return 3 if rack_index % 2 == 0 else 2


def build_inventory() -> Inventory:
    """Site, halls, loops, racks with budgets and feeds, nodes, GPUs with their limits,
    one source token per agent: bulk inserts, ids read back in plan order."""
    from django.db import transaction

    from fleet.choices import LiquidClassChoices, RackCoolingChoices
    from fleet.models import GPU, CoolingLoop, Hall, Node, PowerFeed, Rack, Site

    with transaction.atomic():
        site = Site.objects.create(slug=SLUG, name="Bench site")
        halls = Hall.objects.bulk_create([Hall(site=site, name=n) for n in HALLS])
        loops = CoolingLoop.objects.bulk_create(
            CoolingLoop(
                site=site,
                name=f"CDU-{i + 1:02d}",
                capacity_kw=RACKS_PER_LOOP * RACK_BUDGET_KW,
                liquid_class=LiquidClassChoices.W32,
                rated_flow_lpm=600.0,
            )
            for i in range(LOOPS)
        )
        racks = Rack.objects.bulk_create(
            Rack(
                hall=halls[i * len(HALLS) // RACKS],
                name=f"R{i + 1:03d}",
                cooling=RackCoolingChoices.DIRECT_LIQUID,
                power_budget_kw=RACK_BUDGET_KW,
                loop=loops[i // RACKS_PER_LOOP],
                position=i,
            )
            for i in range(RACKS)
        )
        PowerFeed.objects.bulk_create(
            PowerFeed(rack=rack, name=name) for rack in racks for name in ("A", "B")
        )
        Node.objects.bulk_create(
            Node(name=f"bench-r{i + 1:03d}-n{n}", rack=rack, position=n, model="HGX H200")
            for i, rack in enumerate(racks)
            for n in range(1, nodes_in_rack(i) + 1)
        )
        nodes = list(Node.objects.order_by("rack__position", "position").values_list("id", "rack"))
        GPU.objects.bulk_create(
            GPU(
                node_id=node_id,
                index=g,
                model="NVIDIA H200",
                uuid=f"GPU-bench-{node_id:05d}-{g}",
                slowdown_c=SLOWDOWN_C,
                shutdown_c=SHUTDOWN_C,
                gpu_max_c=GPU_MAX_C,
                mem_max_c=MEM_MAX_C,
                power_limit_max_w=POWER_MAX_W,
            )
            for node_id, _ in nodes
            for g in range(GPUS_PER_NODE)
        )
        add_source_tokens(site)
    inv = Inventory(
        site_id=site.pk,
        racks=list(Rack.objects.order_by("position").values_list("id", flat=True)),
        loops=list(CoolingLoop.objects.order_by("name").values_list("id", flat=True)),
        feeds=list(PowerFeed.objects.order_by("rack__position", "name").values_list("id", "rack")),
        nodes=[n for n, _ in nodes],
        node_rack=dict(nodes),
    )
    assert len(inv.nodes) == NODES and len(inv.racks) == RACKS, "inventory plan is off"
    return inv


def add_source_tokens(site: Any) -> None:
    """A token per node, rack, loop and the site, so `agent_silent_intervals` has sources
    to judge (last_seen kept fresh by `refresh`)."""
    from fleet.models import CoolingLoop, Node, Rack, SourceToken

    sources = [("site", f"site:{SLUG}")]
    sources += [("node", f"node:{n}") for n in Node.objects.values_list("name", flat=True)]
    sources += [("rack", f"rack:{SLUG}/{n}") for n in Rack.objects.values_list("name", flat=True)]
    sources += [
        ("loop", f"loop:{SLUG}/{n}") for n in CoolingLoop.objects.values_list("name", flat=True)
    ]
    SourceToken.objects.bulk_create(
        SourceToken(
            source=source,
            kind=kind,
            site=site,
            token_hash=hashlib.sha256(source.encode()).hexdigest(),
            last_seen=time.time(),
        )
        for kind, source in sources
    )


def add_old_events(inv: Inventory, now: float) -> None:
    """A day of benign XIDs (13, 31, 43: application faults, in neither XID rule's codes),
    so the events rules' grouped counts run over a table that is not empty."""
    from fleet.models import Event

    rng = random.Random(7)
    Event.objects.bulk_create(
        Event(
            source=f"node:{node_id}",
            seq=i,
            pos=0,
            ts=now - rng.uniform(0, 86_400),
            node_id=node_id,
            gpu_index=rng.randrange(GPUS_PER_NODE),
            kind="xid",
            code=rng.choice((13, 31, 43)),
        )
        for i, node_id in enumerate(rng.choices(inv.nodes, k=5000))
    )
