"""The rack page is told only that its rack changed (`live.rack.<id>.changed`): the
publisher builds no rack figures for it, and the page still shows the new figures,
rendered again from the latest state."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import User

from agents.protocol import reasons as nvml
from dashboard import live_pages
from fleet.models import Node, Rack, Site
from fleet.read import payloads
from fleet.read.live import LivePublisher, rack_changed_group
from tests.dashboard.test_live_consumers import ops, site, socket  # noqa: F401 (fixtures)
from tests.dashboard.test_rack_and_cooling_pages import store

pytestmark = pytest.mark.django_db(transaction=True)  # the sockets read from other threads


@pytest.fixture(autouse=True)
def fresh_hub() -> Iterator[None]:
    live_pages._hub = None
    yield
    live_pages._hub = None


async def test_a_rack_page_gets_new_figures_and_the_publisher_builds_none_for_it(
    site: Site,  # noqa: F811
    ops: User,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_figures(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the publisher built rack figures nobody reads")

    monkeypatch.setattr(payloads, "rack_states", no_figures)
    rack = await Rack.objects.aget(name="A01")
    node = await Node.objects.filter(rack=rack).afirst()
    assert node is not None
    page = socket(f"/ws/live/rack/{rack.id}/page", ops)
    assert (await page.connect())[0]
    await database_sync_to_async(store)(
        "gpu", (node.id, 0), time.time(), temp_gpu_c=91.0, power_w=300.0,
        clock_event_reasons=nvml.HW_THERMAL_SLOWDOWN,
    )  # fmt: skip
    publisher = LivePublisher()
    plan = await database_sync_to_async(payloads.plan_updates)({"gpu": {(node.id, 0)}})
    assert rack_changed_group(rack.id) in plan.groups()
    await publisher.publish({"gpu": {(node.id, 0)}})  # what ingest reports as saved
    assert publisher.counters.build_failed == 0 and publisher.counters.published == 1
    assert await page.page_showing("4 °C past slowdown")  # 91 °C against its own 87 °C limit
    await page.disconnect()
