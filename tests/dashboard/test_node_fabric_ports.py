"""The node page's fabric ports: each InfiniBand/RoCE port its agent sent, through the real
ingest pipeline, with its state, rate, link layer and error counters, the rise since first
seen, saturated and unsupported counters said in words, and the flap among the events."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

import pytest
from django.test import Client

from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.ingest.pipeline import IngestPipeline
from fleet.models import Node, Site
from tests.support import people
from tests.support.latest import DjangoSqliteDb
from tests.support.pages import text

pytestmark = pytest.mark.django_db

fast_passwords = people.fast_passwords  # autouse
ops = people.ops_signed_in
NODE = "gpu-a01-01"


@pytest.fixture
def site() -> Site:
    return seed_demo_site("demo", (replace(DEMO_RACKS[0], nodes=1),), gpus_per_node=2)


@pytest.fixture
def node(site: Site) -> Node:
    return Node.objects.get(name=NODE)


def send(node: Node, seq: int, ts: float, *ports: dict[str, Any]) -> None:
    pipeline = IngestPipeline(DjangoSqliteDb(), save_interval_s=3600.0)
    pipeline.hello(1, f"node:{NODE}", node.rack.hall.site_id, "hash")
    batch = {"protocol": 1, "source": f"node:{NODE}", "seq": seq, "fabric": list(ports)}
    [result] = pipeline.process([(1, json.dumps(batch).encode())], time.time())
    assert result.code == 0


def ib(ts: float, link_downed: int, symbol_error: int, state: str = "ACTIVE") -> dict[str, Any]:
    counters = {"link_downed": link_downed, "symbol_error": symbol_error, "port_rcv_errors": 0}
    return {
        "ts": ts,
        "device": "mlx5_3",
        "port": 1,
        "state": state,
        "phys_state": "LinkUp",
        "rate": "400 Gb/sec (4X NDR)",
        "link_layer": "InfiniBand",
        "counters": counters,
    }


def test_each_port_shows_its_state_counters_and_rise_and_the_flap_is_an_event(
    ops: Client, node: Node
) -> None:
    t = time.time() - 120
    roce = {"device": "mlx5_8", "port": 1, "state": "DOWN", "link_layer": "Ethernet"}
    send(node, 1, t, ib(t, 1, 14), {"ts": t, **roce, "counters": {"link_downed": 255}})
    send(node, 2, t + 10, ib(t + 10, 2, 16))
    page = text(ops.get(f"/nodes/{node.id}/"))
    assert "Fabric ports" in page
    assert "mlx5_3 port 1" in page and "ACTIVE · LinkUp" in page and "400 Gb/sec (4X NDR)" in page
    assert "Link went down: 2 (+1 since first seen)" in page
    assert "Symbol errors: 16 (+2 since first seen)" in page
    assert "Packets discarded on send: unsupported" in page  # not sent: not shown as 0
    assert "⚠ DOWN" in page and "RoCE (Ethernet)" in page
    assert "Link went down: ≥ 255 (saturated)" in page
    assert "link_flap" in page and "mlx5_3 port 1: link_downed 1 → 2" in page


def test_a_node_without_fabric_has_no_ports_section(ops: Client, node: Node) -> None:
    page = text(ops.get(f"/nodes/{node.id}/"))
    assert "Fabric ports" not in page and "Host" in page


def test_a_counter_rising_faster_than_the_rules_allow_is_flagged_with_its_rate(
    ops: Client, node: Node
) -> None:
    t = time.time() - 400
    send(node, 1, t, ib(t, 0, 0))
    send(node, 2, t + 300, ib(t + 300, 0, 150))  # 150 in 5 minutes: 1,800 an hour
    page = text(ops.get(f"/nodes/{node.id}/"))
    assert "Symbol errors: 150 (+150 since first seen) · ⚠ 1,800 an hour" in page
    assert "over the last 5–10 min (limit 120)" in page
    send(node, 3, t + 310, ib(t + 310, 0, 150))
    send(node, 4, t + 600, ib(t + 600, 0, 151))  # the window rolled: 1 in 5 minutes
    page = text(ops.get(f"/nodes/{node.id}/"))
    assert "⚠" not in page.split("Symbol errors")[1].split("Bad packets received")[0]
    assert "12 an hour over the last 5–10 min (limit 120)" in page
