"""The rack page is told only that its rack changed (`live.rack.<id>.changed`): the
publisher builds no rack figures for it, and the page still shows the new figures,
rendered again from the latest state."""

from __future__ import annotations

import time
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import User

from agents.protocol import reasons as nvml
from fleet.models import Node, Rack, Site
from fleet.read import payloads
from fleet.read.live import LivePublisher, rack_changed_group
from tests.support import live_sockets
from tests.support.django_data import COMMITS
from tests.support.latest import store_latest as store
from tests.support.live_sockets import socket

pytestmark = COMMITS  # the sockets read from other threads

fresh_hub = live_sockets.fresh_hub  # autouse
site = live_sockets.two_rack_site
ops = live_sockets.ops_viewer


async def test_a_rack_page_gets_new_figures_and_the_publisher_builds_none_for_it(
    site: Site,
    ops: User,
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
