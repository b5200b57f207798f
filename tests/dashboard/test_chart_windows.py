"""History charts keep their window's time axis however little history there is: the server
sends each chart the window it covers (start and end, epoch seconds) and the scripts set the
x axis to it, so a fresh demo's minute of power sits at the right end of a 24 h chart
instead of being stretched across it. Asserted on what the server sends, not in a browser."""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace

import pytest
from django.db import connection
from django.test import Client

from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import GPU, Node, Site
from fleet.storage.schema import raw_table
from tests.support import people

pytestmark = pytest.mark.django_db

DAY = 86400
fast_passwords = people.fast_passwords  # autouse
ops = people.ops_signed_in


@pytest.fixture
def site() -> Site:
    return seed_demo_site("demo", (replace(DEMO_RACKS[0], nodes=1),), gpus_per_node=1)


def a_minute_of(table: str, columns: str, key: tuple[int, ...], value: float) -> float:
    """Rows each 5 s over the last minute; returns the first one's time."""
    now = time.time()
    rows = [(now - 60 + t, *key, value) for t in range(0, 60, 5)]
    marks = ", ".join(["%s"] * len(rows[0]))
    with connection.cursor() as cur:
        cur.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", rows)
    return rows[0][0]


def test_a_gpu_with_a_minute_of_history_is_answered_its_whole_24_h(ops: Client, site: Site) -> None:
    gpu = GPU.objects.get()
    first = a_minute_of(raw_table("gpu"), "ts, node_id, gpu, power_w", (gpu.node_id, 0), 500.0)
    asked = time.time()
    body = ops.get(f"/api/v1/history?kind=gpu&gpu_id={gpu.pk}&metric=power_w&range=24h").json()
    assert body["end"] - body["start"] == DAY and asked <= body["end"] <= time.time()
    points = body["series"]["power_w"]["points"]
    # the points sit at its right end (buckets are labelled by their start)
    assert points and all(first - body["step_s"] <= t <= body["end"] for t, _ in points)


def test_a_node_with_a_minute_of_history_is_answered_its_whole_24_h(
    ops: Client, site: Site
) -> None:
    node = Node.objects.get()
    a_minute_of(raw_table("node"), "ts, node_id, power_w", (node.pk,), 900.0)
    body = ops.get(f"/api/v1/history?kind=node&node_id={node.pk}&metric=power_w&range=24h").json()
    assert body["end"] - body["start"] == DAY
    assert body["series"]["power_w"]["points"]


def test_the_power_chart_carries_its_window_with_a_minute_of_data(ops: Client, site: Site) -> None:
    minute = int(time.time() // 60) * 60
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO fw_facility_1m (site_id, bucket, n, total_power_w_mean, it_power_w_mean)"
            " VALUES (%s, %s, 60, 1.3e6, 1.0e6)",
            [site.pk, minute - 60],
        )
    html = ops.get("/power/").content.decode()
    found = re.search(r'<script id="power-data" type="application/json">(.*?)</script>', html)
    assert found is not None
    payload = json.loads(found.group(1))
    charts, now = payload["charts"][str(site.pk)], payload["now"]
    assert (charts["day"]["start"], charts["day"]["end"]) == (now - DAY, now)
    assert (charts["month"]["start"], charts["month"]["end"]) == (now - 30 * DAY, now)
    assert charts["day"]["t"] == [minute - 60]  # one point, drawn at the right end of 24 h
