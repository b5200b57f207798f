"""A GPU's limits have one owner each: what an operator entered (inventory, admin) is in
force; what the agent reported is kept beside it and used where nothing was entered; the
admin lists the GPUs whose two differ (fleet/health/limits.py, docs/inventory.md)."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from django.test import Client
from django.urls import reverse

from fleet import health
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.health.limits import Origin, limit_in_force
from fleet.models import GPU, Node
from fleet.read.state import gpu_limits
from tests.support import people
from tests.support.latest import store
from tests.support.pages import text
from tests.support.people import viewer

pytestmark = pytest.mark.django_db

NO_LIMITS = {
    "slowdown_c": None,
    "shutdown_c": None,
    "gpu_max_c": None,
    "mem_max_c": None,
    "tlimit_slowdown_c": None,
    "power_limit_max_w": None,
}


fast_passwords = people.fast_passwords  # autouse


@pytest.fixture
def node() -> Node:
    seed_demo_site("demo", (replace(DEMO_RACKS[0], nodes=1),), gpus_per_node=2)
    GPU.objects.update(**NO_LIMITS)
    return Node.objects.get()


def gpu(node: Node, index: int) -> GPU:
    return GPU.objects.get(node=node, index=index)


def headroom_c(node: Node, index: int, temp_c: float) -> float | None:
    """The slowdown headroom every page and rule reads, for a fresh temperature."""
    now = time.time()
    reading = health.Reading({"temp_gpu_c": temp_c}, {"temp_gpu_c": now})
    limits = gpu_limits([node.id]).get((node.id, index))
    return health.gpu_headroom(reading, limits, now).slowdown_c


def test_a_reported_limit_is_in_force_when_the_inventory_has_none(node: Node) -> None:
    GPU.objects.filter(index=0).update(reported_slowdown_c=89.0, reported_power_limit_max_w=700.0)
    assert headroom_c(node, 0, 80.0) == 9.0
    assert gpu_limits([node.id])[(node.id, 0)].power_limit_max_w == 700.0
    assert headroom_c(node, 1, 80.0) is None  # neither source: unknown, never a guess


def test_the_inventorys_limit_wins_when_both_exist(node: Node) -> None:
    GPU.objects.filter(index=0).update(slowdown_c=85.0, reported_slowdown_c=89.0)
    assert headroom_c(node, 0, 80.0) == 5.0
    limit = limit_in_force(85.0, 89.0)
    assert (limit.value, limit.origin) == (85.0, Origin.INVENTORY)


def test_the_gpu_page_shows_each_limit_with_its_origin(node: Node) -> None:
    GPU.objects.filter(index=0).update(
        slowdown_c=85.0, reported_slowdown_c=89.0, reported_shutdown_c=95.0
    )
    store("gpu", (node.id, 0), time.time(), temp_gpu_c=80.0)
    client = Client()
    viewer("ops")
    client.login(username="ops", password="pw")
    page = text(client.get(f"/gpus/{gpu(node, 0).pk}/"))
    assert "Slowdown 85 °C (inventory) · the agent reports 89 °C" in page
    assert "Shutdown 95 °C (reported by the agent)" in page
    assert "slowdown 85 °C: 5 °C below" in page  # the figures measure against the same


def test_the_admin_lists_gpus_whose_entered_and_reported_limits_differ(
    admin_client: Client, node: Node
) -> None:
    GPU.objects.filter(index=0).update(slowdown_c=85.0, reported_slowdown_c=89.0)
    GPU.objects.filter(index=1).update(slowdown_c=89.0, reported_slowdown_c=89.0)
    changelist = reverse("admin:fleet_gpu_changelist")
    differing = text(admin_client.get(changelist + "?limits=differ"))
    assert "slowdown 85 °C entered, 89 °C reported" in differing
    assert f"{node.name}/gpu0" in differing and f"{node.name}/gpu1" not in differing
    every = text(admin_client.get(changelist))
    assert "85 (inventory)" in every and "89 (inventory)" in every
    change = text(admin_client.get(reverse("admin:fleet_gpu_change", args=[gpu(node, 0).pk])))
    assert "slowdown 89 °C" in change  # what the agent reported, read-only beside the form
