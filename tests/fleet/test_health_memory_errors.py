"""What the agent now sends of a GPU's memory and resets, from ingest to the health record
(docs/gpu-health.md): lifetime ECC counts and retired pages in `gpu_info` are stored with
the GPU and judged — 63 retired pages is replace, a page pending retirement needs a reset,
more than 15 pages retired for double-bit errors is watch — and "not supported" stays
distinct from "not reported" and from 0; `gpu_reset` and `driver_reload` events count as
resets, the XIDs before them no longer counted, and a reset the counters show too counts
once."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from fleet.health import record as hr
from fleet.ingest.pipeline import IngestPipeline
from fleet.models import GPU, Event, Node
from fleet.read.health_record import gpu_record
from tests.support import one_node
from tests.support.databases import T
from tests.support.health_seed import counter_run, event, latest, minutes, site_with_gpus

pytestmark = pytest.mark.django_db

node = one_node.node
pipeline = one_node.pipeline

H200 = {
    "ecc_sbe_agg_total": 0,
    "ecc_dbe_agg_total": 0,
    "retired_pages_sbe": "not_supported",
    "retired_pages_dbe": "not_supported",
    "retired_pages_pending": "not_supported",
}
WORN_V100 = {
    "ecc_sbe_agg_total": 18_211,
    "ecc_dbe_agg_total": 41,
    "retired_pages_sbe": 22,
    "retired_pages_dbe": 41,
    "retired_pages_pending": 0,
}


def send(pipeline: IngestPipeline, seq: int, **parts: Any) -> int:
    batch = {"protocol": 1, "source": f"node:{one_node.NODE}", "seq": seq, **parts}
    [result] = pipeline.process([(1, json.dumps(batch).encode())], time.time())
    return result.code


def sent(gpu: GPU, block: dict[str, Any]) -> None:
    """The GPU's agent sent `block` as its memory_errors (stored as ingest stores gpu_info)."""
    GPU.objects.filter(pk=gpu.pk).update(info={**gpu.info, "memory_errors": block})


def test_ingest_stores_the_counts_and_the_reset_events_and_the_record_judges_them(
    pipeline: IngestPipeline, node: Node
) -> None:
    now = time.time()
    gpu_info = [
        {"gpu": 0, "uuid": "GPU-aa", "model": "Tesla V100-SXM2-32GB", "memory_errors": WORN_V100},
        {"gpu": 1, "uuid": "GPU-bb", "model": "NVIDIA H200", "memory_errors": H200},
    ]
    events = [
        {"ts": now - 600, "gpu": 1, "kind": "xid", "code": 79},
        {"ts": now - 300, "gpu": 1, "kind": "driver_reload", "detail": "the node restarted"},
        {"ts": now - 200, "gpu": 0, "kind": "gpu_reset", "detail": "counter started again"},
    ]
    assert send(pipeline, 1, gpu_info=gpu_info, events=events) == 0
    stored = GPU.objects.get(node=node, index=0)
    assert stored.info["memory_errors"] == WORN_V100
    kinds = Event.objects.filter(node=node).order_by("ts").values_list("gpu_index", "kind")
    assert list(kinds) == [(1, "xid"), (1, "driver_reload"), (0, "gpu_reset")]

    worn = gpu_record(stored.pk, now)
    assert worn is not None and worn.state == hr.REPLACE
    first = worn.verdict.evidence[0]
    assert first.observed == "63 pages retired (41 for double-bit errors)"
    assert first.source == "retired-pages-limit"
    assert first.url.startswith("https://github.com/NVIDIA/DCGM/")
    assert (worn.facts.ecc_dbe_aggregate, worn.facts.retired_pages) == (41, 63)
    assert worn.facts.resets == 1 and worn.facts.last_reset_ts == pytest.approx(now - 200)

    h200 = gpu_record(GPU.objects.get(node=node, index=1).pk, now)
    assert h200 is not None
    # the reload came after the XID 79: no reboot needed any more, the fall itself watched
    assert h200.state == hr.WATCH
    assert h200.facts.xids == () and h200.facts.resets == 1
    assert h200.facts.retired_pages is None
    assert h200.facts.unsupported == {
        "retired_pages_sbe",
        "retired_pages_dbe",
        "retired_pages_pending",
    }
    assert h200.facts.ecc_sbe_aggregate == 0


@pytest.mark.parametrize(
    ("where", "value", "field"),
    [
        ("retired_pages_dbe", -1, "gpu_info[0].memory_errors.retired_pages_dbe"),
        ("retired_pages_dbe", "none", "gpu_info[0].memory_errors.retired_pages_dbe"),
        ("retired_pages_dbe", 1.5, "gpu_info[0].memory_errors.retired_pages_dbe"),
        ("pages", 3, "gpu_info[0].memory_errors.pages"),
    ],
)
def test_a_bad_count_is_refused_naming_it_and_nothing_is_stored(
    pipeline: IngestPipeline, node: Node, where: str, value: Any, field: str
) -> None:
    batch = {
        "protocol": 1,
        "source": f"node:{one_node.NODE}",
        "seq": 1,
        "gpu_info": [{"gpu": 0, "uuid": "GPU-aa", "memory_errors": {where: value}}],
        "events": [{"ts": time.time(), "gpu": 0, "kind": "gpu_reset"}],
    }
    [result] = pipeline.process([(1, json.dumps(batch).encode())], time.time())
    assert result.code == 400
    assert result.error is not None and result.error["field"] == field
    assert "memory_errors" not in GPU.objects.get(node=node, index=0).info
    assert not Event.objects.filter(node=node).exists()


def test_a_pending_page_needs_a_reset_and_many_dbe_pages_are_watched() -> None:
    place = site_with_gpus(per_node=3)
    pending, many, few = place.gpus
    sent(
        pending,
        {**WORN_V100, "retired_pages_sbe": 1, "retired_pages_dbe": 2, "retired_pages_pending": 1},
    )
    sent(many, {**WORN_V100, "retired_pages_sbe": 0, "retired_pages_dbe": 16})
    sent(few, {**WORN_V100, "retired_pages_sbe": 40, "retired_pages_dbe": 15})
    now = T + 600

    r = gpu_record(pending.pk, now)
    assert r is not None and r.state == hr.RESET_NEEDED
    assert r.verdict.evidence[0].observed == "retired_pages_pending = 1"
    assert r.verdict.evidence[0].url == hr.SOURCES["page-retirement"]

    r = gpu_record(many.pk, now)
    assert r is not None and r.state == hr.WATCH
    (e,) = r.verdict.evidence
    assert (e.criterion, e.observed) == (
        "more than 15 pages retired for double-bit errors",
        "16 pages",
    )
    r = gpu_record(few.pk, now)
    assert r is not None and r.state == hr.HEALTHY  # 55 in all, 15 for double-bit errors


def test_lifetime_double_bit_errors_alone_judge_nothing() -> None:
    """NVIDIA documents no threshold on the aggregate count: the repairs (remaps, retired
    pages) are what its RMA criteria judge; the count is shown and exported."""
    place = site_with_gpus(per_node=1)
    (gpu,) = place.gpus
    sent(gpu, {**H200, "ecc_dbe_agg_total": 7})
    r = gpu_record(gpu.pk, T + 600)
    assert r is not None and r.state == hr.HEALTHY and r.facts.ecc_dbe_aggregate == 7


def test_a_reset_seen_by_the_agent_and_by_the_counters_counts_once_at_the_event() -> None:
    place = site_with_gpus(per_node=2)
    both, events_only = place.gpus
    # 10:00–10:05 running; an XID 63 at 10:03; the agent resets it: energy starts again in
    # the 10:06 minute, the agent's event at 10:06:20
    minutes(both, counter_run(T, 5, energy_j=5e6))
    minutes(both, counter_run(T + 360, 5, energy_j=100.0))
    event(both, T + 180, code=63)
    event(both, T + 380, kind="gpu_reset")
    event(both, T + 400, code=63)  # after the reset (and inside its minute): counts
    latest(both, T + 600, remap_pending=0)
    r = gpu_record(both.pk, T + 700)
    assert r is not None
    assert r.facts.resets == 1
    assert r.facts.last_reset_ts == T + 380  # the event's moment, not the minute's end
    assert [(x.code, x.count) for x in r.facts.xids] == [(63, 1)]

    # two driver reloads the counters never showed (no rollup rows): both count
    event(events_only, T + 100, kind="driver_reload")
    event(events_only, T + 500, kind="driver_reload")
    r = gpu_record(events_only.pk, T + 700)
    assert r is not None and (r.facts.resets, r.facts.last_reset_ts) == (2, T + 500)
