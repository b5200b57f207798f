"""The demo site: 2 halls of 8 racks, 64 HGX nodes × 8 GPUs = 512 GPUs (H200 in hall A,
H100 in hall B). A01 and A02 are direct-liquid racks on CDU-1, A03 an immersion tank on
CDU-2, the rest air-cooled; meters for a category-2 PUE. Seeding is idempotent.

Physically plausible, so a fault reads as it would on a real floor:
- an HGX 8-GPU server is 8U and ~10.2 kW (NVIDIA's DGX H100 specifications, in
  docs/reference/facility.md "Server and rack power"; 4 per rack ≈ 41 kW): 4 per 42U rack
  at U1, U9, U17, U25, the top 10U left for the leaf switches and the management network;
- each rack's budget is its servers' nameplate plus its switches (45 kW), and each of its
  two feeds A and B alone carries that budget (2N: either side can fail); a plan whose
  feeds do not is listed by `feed_warnings`, and the rack page says so;
- the CDUs are sized for their racks: CDU-1 for A01 + A02's liquid heat, CDU-2 for A03,
  with the rated flow that gives a 10 K rise at capacity.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from fleet.choices import (
    LiquidClassChoices,
    MeterRoleChoices,
    PowerFeedTypeChoices,
    RackCoolingChoices,
)
from fleet.models import (
    GPU,
    CoolingLoop,
    EnrollmentToken,
    FacilityMeter,
    Hall,
    Node,
    PowerFeed,
    Rack,
    Site,
    hash_token,
)

# GPU model names as NVML reports them (the H200 capture's "Product Name"; the H100's as
# `nvidia-smi -q` prints it, docs/reference/gpu.md). Their memory and limits:
# fleetsim/physics.py GpuSpec.
H200 = "NVIDIA H200"
H100 = "NVIDIA H100 80GB HBM3"

RACK_UNITS = 42  # a standard 42U rack
NODE_UNITS = 8  # an HGX 8-GPU server (docs/reference/facility.md)
NODES_PER_RACK = 4  # 32U of servers, 10U for switches and management
RACK_BUDGET_KW = 45.0  # 4 × ~10.2 kW nameplate + ~4 kW of switches (docs/reference/facility.md)
FEED_AMPS = 80  # 415 V three-phase at 80 %: 46.0 kW, so one feed carries the 45 kW budget
LIQUID_DESIGN_RISE_K = 10.0  # a CDU's rated flow gives this rise at its capacity
WATER_CP_KJ_PER_KG_K = 4.186


@dataclass(frozen=True)
class RackPlan:
    hall: str
    name: str
    cooling: str
    budget_kw: float
    nodes: int
    loop: str | None
    feed_amps: int
    gpu_model: str


@dataclass(frozen=True)
class LoopPlan:
    name: str
    capacity_kw: float
    liquid_class: str

    @property
    def rated_flow_lpm(self) -> float:
        """The flow that carries the capacity at a 10 K rise (water: 1 kg ≈ 1 L)."""
        kg_s = self.capacity_kw / (WATER_CP_KJ_PER_KG_K * LIQUID_DESIGN_RISE_K)
        return round(kg_s * 60.0)


RACKS_PER_HALL = 8
AIR: tuple[str, str | None] = (RackCoolingChoices.AIR, None)


def _hall(
    hall: str, prefix: str, gpu_model: str, liquid: dict[int, tuple[str, str | None]]
) -> tuple[RackPlan, ...]:
    """The racks of a hall, air-cooled unless `liquid` gives their cooling and loop."""
    plans = []
    for number in range(1, RACKS_PER_HALL + 1):
        cooling, loop = liquid.get(number, AIR)
        name = f"{prefix}{number:02d}"
        plans.append(
            RackPlan(
                hall, name, cooling, RACK_BUDGET_KW, NODES_PER_RACK, loop, FEED_AMPS, gpu_model
            )
        )
    return tuple(plans)


DEMO_RACKS: tuple[RackPlan, ...] = (
    *_hall(
        "Hall A",
        "A",
        H200,
        {
            1: (RackCoolingChoices.DIRECT_LIQUID, "CDU-1"),
            2: (RackCoolingChoices.DIRECT_LIQUID, "CDU-1"),
            3: (RackCoolingChoices.IMMERSION, "CDU-2"),
        },
    ),
    *_hall("Hall B", "B", H100, {}),
)
# Sized for their racks' liquid heat at full budget (direct liquid: ~80 % of a rack's heat
# goes to the water; immersion: all of it), rounded up.
DEMO_LOOPS: tuple[LoopPlan, ...] = (
    LoopPlan("CDU-1", 80.0, LiquidClassChoices.W32),
    LoopPlan("CDU-2", 50.0, LiquidClassChoices.W40),
)


def node_name(rack: str, position: int) -> str:
    return f"gpu-{rack.lower()}-{position:02d}"


def node_unit(number: int) -> int:
    """The lowest rack unit of the rack's `number`th server (1-based), from the bottom."""
    return 1 + (number - 1) * NODE_UNITS


def node_model(gpu_model: str) -> str:
    """The server model for its GPU model: "HGX H200 8-GPU" for "NVIDIA H200"."""
    return f"HGX {gpu_model.split()[1]} 8-GPU"


def feed_kw(amps: int, volts: int = 415, max_utilization_pct: int = 80) -> float:
    """A three-phase feed's available kW, as PowerFeed.available_kw works it out."""
    return PowerFeed(voltage=volts, amperage=amps, max_utilization=max_utilization_pct).available_kw


def feed_warnings(racks: tuple[RackPlan, ...] = DEMO_RACKS) -> list[str]:
    """Racks whose A or B feed alone cannot carry the budget: not 2N (the rack page's N+1
    section says the same of the seeded site)."""
    return [
        f"{plan.name}: one {plan.feed_amps} A feed carries {feed_kw(plan.feed_amps):.1f} kW,"
        f" under the {plan.budget_kw:g} kW budget: losing feed A or B can trip the other"
        for plan in racks
        if feed_kw(plan.feed_amps) < plan.budget_kw
    ]


@transaction.atomic
def seed_demo_site(
    slug: str = "demo", racks: tuple[RackPlan, ...] = DEMO_RACKS, gpus_per_node: int = 8
) -> Site:
    site, _ = Site.objects.get_or_create(slug=slug, defaults={"name": "Demo datacentre"})
    loops = {plan.name: _loop(site, plan) for plan in DEMO_LOOPS}
    for pos, plan in enumerate(racks):
        hall, _ = Hall.objects.get_or_create(site=site, name=plan.hall)
        rack, _ = Rack.objects.get_or_create(
            hall=hall,
            name=plan.name,
            defaults={
                "cooling": plan.cooling,
                "power_budget_kw": plan.budget_kw,
                "loop": loops[plan.loop] if plan.loop else None,
                "position": pos,
            },
        )
        for feed, kind in (
            ("A", PowerFeedTypeChoices.PRIMARY),
            ("B", PowerFeedTypeChoices.PRIMARY),
        ):
            PowerFeed.objects.get_or_create(
                rack=rack, name=feed, defaults={"type": kind, "amperage": plan.feed_amps}
            )
        for n in range(1, plan.nodes + 1):
            node, _ = Node.objects.get_or_create(
                name=node_name(plan.name, n),
                defaults={
                    "rack": rack,
                    "position": node_unit(n),
                    "model": node_model(plan.gpu_model),
                },
            )
            for index in range(gpus_per_node):
                GPU.objects.get_or_create(
                    node=node, index=index, defaults={"model": plan.gpu_model}
                )
    for name, role in (
        ("Utility", MeterRoleChoices.UTILITY),
        ("UPS-out", MeterRoleChoices.UPS_OUTPUT),
        ("PDU-out", MeterRoleChoices.PDU_OUTPUT),
    ):
        FacilityMeter.objects.get_or_create(site=site, name=name, defaults={"role": role})
    return site


def _loop(site: Site, plan: LoopPlan) -> CoolingLoop:
    loop, _ = CoolingLoop.objects.get_or_create(
        site=site,
        name=plan.name,
        defaults={
            "capacity_kw": plan.capacity_kw,
            "liquid_class": plan.liquid_class,
            "rated_flow_lpm": plan.rated_flow_lpm,
        },
    )
    return loop


def ensure_enrollment_token(site: Site, plain: str) -> None:
    """Make `plain` a valid enrolment token for the site (idempotent)."""
    if not EnrollmentToken.objects.filter(token_hash=hash_token(plain)).exists():
        EnrollmentToken.issue(site, label="demo", plain=plain)
