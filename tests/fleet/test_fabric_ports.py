"""A node's InfiniBand/RoCE ports through the ingest pipeline (fleet/storage/fabric.py): each
port's newest state and counters are kept, a rise in `link_downed` is a `link_flap` event and
a port leaving ACTIVE a `link_down` event, in the batch's own commit; a resend or an older
read changes nothing, and a bad part is refused storing nothing of its batch."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from fleet.ingest.pipeline import IngestPipeline
from fleet.models import Event, FabricPort, Node
from fleet.storage.fabric import LINK_DOWN, LINK_FLAP
from tests.support import one_node

pytestmark = pytest.mark.django_db

NODE = one_node.NODE


node = one_node.node
pipeline = one_node.pipeline


def port(
    device: str = "mlx5_0", state: str = "ACTIVE", link_downed: int = 0, **counters: int
) -> dict[str, Any]:
    return {
        "device": device,
        "port": 1,
        "state": state,
        "phys_state": "LinkUp" if state == "ACTIVE" else "Polling",
        "rate": "400 Gb/sec (4X NDR)",
        "link_layer": "InfiniBand",
        "counters": {"link_downed": link_downed, "symbol_error": 0, **counters},
    }


def send(pipeline: IngestPipeline, seq: int, ts: float, *ports: dict[str, Any], **rest: Any) -> int:
    """One batch carrying one read of `ports` at `ts`; the answer's code (0: stored)."""
    batch = {
        "protocol": 1,
        "source": f"node:{NODE}",
        "seq": seq,
        "fabric": [{"ts": ts, **p} for p in ports],
        **rest,
    }
    [result] = pipeline.process([(1, json.dumps(batch).encode())], time.time())
    return result.code


def link_events() -> list[tuple[str, int | None, str]]:
    rows = Event.objects.filter(kind__in=(LINK_FLAP, LINK_DOWN)).order_by("ts", "pos")
    return [(e.kind, e.code, e.detail) for e in rows]


def test_each_port_is_stored_with_its_state_and_counters_and_no_event_at_first(
    pipeline: IngestPipeline, node: Node
) -> None:
    t = time.time() - 60
    assert send(pipeline, 1, t, port("mlx5_0", link_downed=3), port("mlx5_1")) == 0
    stored = {p.device: p for p in FabricPort.objects.filter(node=node)}
    assert sorted(stored) == ["mlx5_0", "mlx5_1"]
    first = stored["mlx5_0"]
    assert (first.state, first.rate, first.link_layer) == (
        "ACTIVE",
        "400 Gb/sec (4X NDR)",
        "InfiniBand",
    )
    assert first.counters["link_downed"] == 3 and first.rises["link_downed"] == 0
    assert link_events() == []  # a port's past before it was first seen is not judged


def test_a_rise_in_link_downed_is_a_link_flap_event(pipeline: IngestPipeline, node: Node) -> None:
    t = time.time() - 60
    send(pipeline, 1, t, port("mlx5_0", link_downed=3), port("mlx5_1"))
    assert send(pipeline, 2, t + 10, port("mlx5_0", link_downed=5), port("mlx5_1")) == 0
    assert link_events() == [(LINK_FLAP, 2, "mlx5_0 port 1: link_downed 3 → 5")]
    flap = Event.objects.get(kind=LINK_FLAP)
    assert (flap.node_id, flap.gpu_index, flap.ts) == (node.id, None, t + 10)
    assert FabricPort.objects.get(device="mlx5_0").rises["link_downed"] == 2


def test_a_port_leaving_active_is_a_link_down_event(pipeline: IngestPipeline) -> None:
    t = time.time() - 60
    send(pipeline, 1, t, port("mlx5_2"))
    send(pipeline, 2, t + 10, port("mlx5_2", state="DOWN", link_downed=1))
    send(pipeline, 3, t + 20, port("mlx5_2", state="DOWN", link_downed=1))  # still down
    assert link_events() == [
        (LINK_FLAP, 1, "mlx5_2 port 1: link_downed 0 → 1"),
        (LINK_DOWN, 0, "mlx5_2 port 1: ACTIVE → DOWN"),
    ]
    assert FabricPort.objects.get(device="mlx5_2").phys_state == "Polling"


def test_a_resent_or_older_read_changes_nothing(pipeline: IngestPipeline) -> None:
    t = time.time() - 60
    send(pipeline, 1, t, port(link_downed=0))
    assert send(pipeline, 2, t + 10, port(link_downed=1)) == 0
    assert send(pipeline, 2, t + 10, port(link_downed=1)) == 0  # the ack was lost: resent
    assert send(pipeline, 3, t + 5, port(link_downed=0, symbol_error=9)) == 0  # older
    assert len(link_events()) == 1
    stored = FabricPort.objects.get()
    assert (stored.ts, stored.counters["link_downed"], stored.counters["symbol_error"]) == (
        t + 10,
        1,
        0,
    )


def test_a_reset_counter_adds_what_it_reads_after_the_reset(pipeline: IngestPipeline) -> None:
    t = time.time() - 60
    send(pipeline, 1, t, port(link_downed=4, symbol_error=100))
    send(pipeline, 2, t + 10, port(link_downed=0, symbol_error=7))  # reset (a reboot)
    send(pipeline, 3, t + 20, port(link_downed=0, symbol_error=10))
    assert FabricPort.objects.get().rises == {"link_downed": 0, "symbol_error": 10}
    assert link_events() == []  # a reset to 0 is no flap


def test_a_bad_part_is_refused_and_its_batch_stores_nothing(
    pipeline: IngestPipeline, node: Node
) -> None:
    t = time.time() - 60
    send(pipeline, 1, t, port(link_downed=0))
    bad = port(link_downed=1)
    bad["counters"]["link_downed"] = -1
    gpu = [{"ts": t + 10, "gpu": 0, "power_w": 500.0}]
    assert send(pipeline, 2, t + 10, bad, port("mlx5_1"), gpu=gpu) == 400
    assert FabricPort.objects.filter(node=node).count() == 1
    assert FabricPort.objects.get().counters["link_downed"] == 0
    assert link_events() == []
