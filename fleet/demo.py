"""The demo site: 2 halls, 8 racks (two direct-liquid racks at 130 kW, an
immersion tank, air racks), 64 nodes × 8 GPUs (H200 in hall A, H100 in hall B),
2 CDUs and the meters for a category-2 PUE. Seeding is idempotent."""

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

H200 = "NVIDIA H200"
H100 = "NVIDIA H100 80GB HBM3"


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


DEMO_RACKS: tuple[RackPlan, ...] = (
    RackPlan("Hall A", "A01", RackCoolingChoices.DIRECT_LIQUID, 130, 16, "CDU-1", 125, H200),
    RackPlan("Hall A", "A02", RackCoolingChoices.DIRECT_LIQUID, 130, 16, "CDU-1", 125, H200),
    RackPlan("Hall A", "A03", RackCoolingChoices.IMMERSION, 80, 8, "CDU-2", 100, H200),
    RackPlan("Hall A", "A04", RackCoolingChoices.AIR, 45, 4, None, 100, H200),
    RackPlan("Hall B", "B01", RackCoolingChoices.AIR, 55, 5, None, 100, H100),
    RackPlan("Hall B", "B02", RackCoolingChoices.AIR, 55, 5, None, 100, H100),
    RackPlan("Hall B", "B03", RackCoolingChoices.AIR, 55, 5, None, 100, H100),
    RackPlan("Hall B", "B04", RackCoolingChoices.AIR, 55, 5, None, 100, H100),
)


def node_name(rack: str, position: int) -> str:
    return f"gpu-{rack.lower()}-{position:02d}"


@transaction.atomic
def seed_demo_site(
    slug: str = "demo", racks: tuple[RackPlan, ...] = DEMO_RACKS, gpus_per_node: int = 8
) -> Site:
    site, _ = Site.objects.get_or_create(slug=slug, defaults={"name": "Demo datacentre"})
    loops = {
        "CDU-1": _loop(site, "CDU-1", 300, LiquidClassChoices.W32),
        "CDU-2": _loop(site, "CDU-2", 120, LiquidClassChoices.W40),
    }
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
                defaults={"rack": rack, "position": n, "model": f"HGX {plan.gpu_model[7:11]}"},
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


def _loop(site: Site, name: str, capacity_kw: float, liquid_class: str) -> CoolingLoop:
    loop, _ = CoolingLoop.objects.get_or_create(
        site=site,
        name=name,
        defaults={"capacity_kw": capacity_kw, "liquid_class": liquid_class, "rated_flow_lpm": 600},
    )
    return loop


def ensure_enrollment_token(site: Site, plain: str) -> None:
    """Make `plain` a valid enrolment token for the site (idempotent)."""
    if not EnrollmentToken.objects.filter(token_hash=hash_token(plain)).exists():
        EnrollmentToken.issue(site, label="demo", plain=plain)
