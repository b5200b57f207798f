"""The fleet overview's size at scale: each rack adds its tile and its payload to `GET /`,
and at 10,000 GPUs (500 racks of 20) the page must stay within `fleet_page_kb ≤ 1024`
(docs/benchmarks.md, bench/freshness.py). Measured as the bytes one more busy rack adds,
so a feature that grows every tile shows here, not only when someone runs the bench; and
the page's JSON is compact UTF-8 (dashboard/browser_json.py)."""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace

import pytest
from django.test import Client

from agents.protocol import reasons as nvml
from bench.freshness_page import TARGET_PAGE_KB
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import GPU, Node
from tests.support import people
from tests.support.latest import store_latest as store

pytestmark = pytest.mark.django_db
fast_passwords = people.fast_passwords  # autouse
client = people.ops_signed_in


@pytest.fixture
def site() -> None:
    """The racks are added by each test; the demo site's loops are there for them."""
    seed_demo_site("demo", ())


PAGE_BOUND_BYTES = int(TARGET_PAGE_KB * 1024)  # the bench's fleet_page_kb target
RACKS_AT_10K = 500  # bench/freshness.py's inventory: racks of 3 and 2 nodes × 8 GPUs


def racks(first: int, last: int) -> None:
    """Racks R<first>…R<last> on CDU-1, sized like bench/freshness.py's (2 nodes × 8 GPUs,
    a 40 kW budget), every figure present: most busy and healthy (power at two thirds of
    the budget, GPUs at their power limit, 15 °C from slowdown), every fifth in trouble
    (power near its budget, a GPU in thermal slowdown 2 °C from it), which makes a tile's
    longest words."""
    plans = tuple(
        replace(DEMO_RACKS[0], name=f"R{n:03d}", nodes=2, budget_kw=40, feed_amps=63)
        for n in range(first, last + 1)
    )
    seed_demo_site("demo", plans, gpus_per_node=8)
    GPU.objects.update(slowdown_c=87.0, shutdown_c=92.0)
    now = time.time()
    for node in Node.objects.filter(rack__name__in=[p.name for p in plans]):
        trouble = int(node.rack.name[1:]) % 5 == 0
        store("node", (node.id,), now, power_w=18_500.0 if trouble else 13_500.0, inlet_c=27.0)
        for gpu in range(8):
            hot = trouble and gpu == 0
            reasons = nvml.HW_THERMAL_SLOWDOWN if hot else nvml.SW_POWER_CAP
            temp = 85.0 if hot else 72.0
            store(
                "gpu",
                (node.id, gpu),
                now,
                power_w=690.0,
                temp_gpu_c=temp,
                clock_event_reasons=reasons,
            )


def page_bytes(client: Client) -> int:
    response = client.get("/")
    assert response.status_code == 200
    return len(response.content)


def test_the_page_for_500_racks_stays_within_its_bound(client: Client) -> None:
    # The page's fixed part, then what each rack adds (tile and payload), projected to the
    # 500 racks of 10,000 GPUs: a feature that grows every tile shows here.
    racks(1, 10)
    ten = page_bytes(client)
    racks(11, 30)
    per_rack = (page_bytes(client) - ten) / 20
    projected = ten + (RACKS_AT_10K - 10) * per_rack
    assert per_rack > 1000  # the racks are on the page
    assert projected <= PAGE_BOUND_BYTES, f"{projected / 1024:.0f} KiB ({per_rack:.0f} B a rack)"


def test_the_page_payload_is_compact_utf8_json(client: Client) -> None:
    racks(1, 2)
    page = client.get("/").content.decode()
    found = re.search(r'<script id="fleet-data" type="application/json">(.*?)</script>', page)
    assert found is not None
    text = found.group(1)
    assert json.loads(text)["racks"]
    assert ", " not in text.replace('", "', "") and '": ' not in text
    assert "°C" in text and "\\u00b0" not in text  # UTF-8, not escapes
