"""The simulator's alert scenario, shared by the physics and reset tests: A01/A02 (two
direct-liquid nodes of 8 H200 each) on CDU-1, A03 (immersion) on CDU-2, every rack held at
85 % of its budget, CDU-1's pumps off from 15 s for `outage_s`."""

from __future__ import annotations

from fleetsim.faults import FaultPlan, parse_fault
from fleetsim.fleet import SiteModel
from fleetsim.inventory import Feed, Inventory, Loop, Node, Rack

PUMPS_OFF_AT_S = 15


def pump_failure_site(liquid_budget_kw: float, outage_s: int) -> SiteModel:
    """The scenario with A01/A02's budget `liquid_budget_kw` (a larger budget, less heat)."""
    feeds = (Feed("A", 71.9), Feed("B", 71.9))
    racks = (
        Rack("A01", "Hall A", "direct_liquid", liquid_budget_kw, "CDU-1", feeds),
        Rack("A02", "Hall A", "direct_liquid", liquid_budget_kw, "CDU-1", feeds),
        Rack("A03", "Hall A", "immersion", 80.0, "CDU-2", (Feed("A", 57.5), Feed("B", 57.5))),
    )
    h200 = tuple((i, "NVIDIA H200") for i in range(8))
    nodes = tuple(
        Node(f"gpu-{rack.lower()}-{n:02d}", rack, h200)
        for rack, count in (("A01", 2), ("A02", 2), ("A03", 1))
        for n in range(1, count + 1)
    )
    loops = (Loop("CDU-1", 300.0, 32.0), Loop("CDU-2", 120.0, 40.0))
    faults = [f"cdu-pump-fail:CDU-1@{PUMPS_OFF_AT_S}s+{outage_s}s"]
    faults += [f"rack-overload:{r.name},factor=0.85" for r in racks]
    plan = FaultPlan([parse_fault(f) for f in faults])
    return SiteModel(Inventory("demo", "Demo", racks, loops, nodes), plan, seed=0)
