"""The demo site: 3 halls, 18 racks, 100 nodes, 656 GPUs. Halls A and B: 8 racks each of
4 HGX 8-GPU servers (H200 in hall A, H100 in hall B), 512 GPUs; A01 and A02 are
direct-liquid racks on CDU-1, A03 an immersion tank on CDU-2, the rest air-cooled. Hall C,
the AI hall: 2 GB200 NVL72 racks of 18 compute trays × 4 GPUs (144 GPUs, ~124 kW each at
full load) on CDU-3 of their own. Meters for a category-2 PUE. Seeding is idempotent.

Physically plausible, so a fault reads as it would on a real floor:
- an HGX 8-GPU server is 8U and ~10.2 kW (NVIDIA's DGX H100 specifications, in
  docs/reference/facility.md "Server and rack power"; 4 per rack ≈ 41 kW): 4 per 42U rack
  at U1, U9, U17, U25, the top 10U left for the leaf switches and the management network;
- each rack's budget is its servers' nameplate plus its switches (45 kW), and each of its
  two feeds A and B alone carries that budget (2N: either side can fail); a plan whose
  feeds do not is listed by `feed_warnings`, and the rack page says so;
- the CDUs are sized for their racks: CDU-1 for A01 + A02's liquid heat, CDU-2 for A03,
  CDU-3 for C01 + C02, with the rated flow that gives a 10 K rise at capacity;
- an NVL72 rack (NVIDIA's GB200 NVL72 reference design) is 18 1U compute trays of 2 Grace
  CPUs and 4 Blackwell GPUs, 9 NVLink Switch trays in the middle and 8 power shelves of
  6 × 5.5 kW PSUs (33 kW each; NVIDIA Base Command Manager, "Power Shelf Integration",
  https://docs.nvidia.com/base-command-manager/product-manuals/nvidia-mission-control/
  powershelf.md); ~120 kW per rack (https://www.nvidia.com/en-us/data-center/gb200-nvl72/),
  132 kW at most, its budget here. Four feeds, each taking two shelves: any three carry
  the budget (N+1), two cannot.
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
from fleet.health.racks import n_plus_one_kw
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
GB200 = "NVIDIA GB200"  # as nvidia-smi names a GB200 NVL72 tray's GPUs

RACK_UNITS = 42  # a standard 42U rack
NODE_UNITS = 8  # an HGX 8-GPU server (docs/reference/facility.md)
NODES_PER_RACK = 4  # 32U of servers, 10U for switches and management
RACK_BUDGET_KW = 45.0  # 4 × ~10.2 kW nameplate + ~4 kW of switches (docs/reference/facility.md)
FEED_AMPS = 80  # 415 V three-phase at 80 %: 46.0 kW, so one feed carries the 45 kW budget
# GB200 NVL72 (module docstring): 18 compute trays of 4 GPUs, 1U each, at U5–U12 and
# U22–U31: power shelves at U1–U4 and U32–U35, the 9 NVLink Switch trays at U13–U21.
NVL72_TRAYS = 18
NVL72_GPUS_PER_TRAY = 4
NVL72_TRAY_UNITS: tuple[int, ...] = (*range(5, 13), *range(22, 32))
NVL72_TRAY_MODEL = "GB200 NVL72 compute tray"
NVL72_BUDGET_KW = 132.0
NVL72_FEEDS = 4  # 80 A each (46.0 kW): any 3 carry 138 kW ≥ 132 kW, N+1
FEED_NAMES = "ABCD"
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
    gpus_per_node: int = 8
    feeds: int = 2

    @property
    def server_model(self) -> str:
        """The server's model: "HGX H200 8-GPU", or the NVL72's compute tray."""
        return NVL72_TRAY_MODEL if self.gpu_model == GB200 else node_model(self.gpu_model)

    def server_unit(self, number: int) -> int:
        """The lowest rack unit of the rack's `number`th server (1-based), from the bottom."""
        if self.gpu_model == GB200:
            return NVL72_TRAY_UNITS[number - 1]
        return node_unit(number)

    @property
    def server_units(self) -> int:
        return 1 if self.gpu_model == GB200 else NODE_UNITS


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
    *(
        RackPlan(
            "Hall C",
            f"C{number:02d}",
            RackCoolingChoices.DIRECT_LIQUID,
            NVL72_BUDGET_KW,
            NVL72_TRAYS,
            "CDU-3",
            FEED_AMPS,
            GB200,
            gpus_per_node=NVL72_GPUS_PER_TRAY,
            feeds=NVL72_FEEDS,
        )
        for number in (1, 2)
    ),
)
# Sized for their racks' liquid heat at full budget (direct liquid: ~80 % of an HGX rack's
# heat goes to the water, ~85 % of an NVL72's; immersion: all of it), rounded up.
DEMO_LOOPS: tuple[LoopPlan, ...] = (
    LoopPlan("CDU-1", 80.0, LiquidClassChoices.W32),
    LoopPlan("CDU-2", 50.0, LiquidClassChoices.W40),
    LoopPlan("CDU-3", 250.0, LiquidClassChoices.W32),  # 2 × 132 kW × 0.85 = 224 kW
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
    """Racks whose feeds less any one cannot carry the budget: not N+1 (with feeds A and
    B, not 2N; the rack page's N+1 section says the same of the seeded site)."""
    warnings = []
    for plan in racks:
        left_kw = n_plus_one_kw([feed_kw(plan.feed_amps)] * plan.feeds)
        if left_kw >= plan.budget_kw:
            continue
        if plan.feeds == 2:
            warnings.append(
                f"{plan.name}: one {plan.feed_amps} A feed carries {left_kw:.1f} kW, under the"
                f" {plan.budget_kw:g} kW budget: losing feed A or B can trip the other"
            )
        else:
            warnings.append(
                f"{plan.name}: {plan.feeds - 1} of its {plan.feeds} {plan.feed_amps} A feeds"
                f" carry {left_kw:.1f} kW, under the {plan.budget_kw:g} kW budget: losing"
                " one feed can trip the others"
            )
    return warnings


@transaction.atomic
def seed_demo_site(
    slug: str = "demo", racks: tuple[RackPlan, ...] = DEMO_RACKS, gpus_per_node: int | None = None
) -> Site:
    """Create what is missing of the site; `gpus_per_node` overrides each plan's own (tests
    seed small sites)."""
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
        for feed in FEED_NAMES[: plan.feeds]:
            PowerFeed.objects.get_or_create(
                rack=rack,
                name=feed,
                defaults={"type": PowerFeedTypeChoices.PRIMARY, "amperage": plan.feed_amps},
            )
        for n in range(1, plan.nodes + 1):
            node, _ = Node.objects.get_or_create(
                name=node_name(plan.name, n),
                defaults={
                    "rack": rack,
                    "position": plan.server_unit(n),
                    "model": plan.server_model,
                },
            )
            for index in range(plan.gpus_per_node if gpus_per_node is None else gpus_per_node):
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
