"""The simulator's GPUs report what an agent on an H200 reports of its memory and resets:
`gpu_info.memory_errors` with the lifetime ECC counts and page retirement "not_supported",
sent again when a double-bit error changes a count; the `gpu-reset` fault step is a
`gpu_reset` event, as the agent sends it (docs/simulator.md, "Faults")."""

from __future__ import annotations

import time

from agents.collectors.base import Reading
from agents.outbox import build_batch
from agents.protocol.validate import validate_batch
from fleetsim.faults import FaultPlan, parse_fault
from fleetsim.fleet import SiteModel
from fleetsim.inventory import parse_inventory
from tests.support.stub_server import SMALL_SITE

NODE = "gpu-a01-01"


def _site(faults: list[str]) -> SiteModel:
    return SiteModel(parse_inventory(SMALL_SITE), FaultPlan([parse_fault(f) for f in faults]), 1)


def _run(model: SiteModel, until: int, start: int = 0) -> None:
    for t in range(start, until):
        model.step(1.0, float(t), wall=time.time())


def _reading(model: SiteModel, with_info: bool = False) -> Reading:
    reading = model.node_reading(NODE, time.time(), with_info=with_info)
    validate_batch(build_batch(f"node:{NODE}", 1, reading, {}), time.time() + 10)
    return reading


def test_gpu_info_carries_the_memory_errors_and_a_dbe_sends_it_again() -> None:
    model = _site(["ecc-dbe:gpu-a01-01/3@5"])
    first = _reading(model, with_info=True)
    errors = {i["gpu"]: i["memory_errors"] for i in first.gpu_info}
    assert errors[3] == {
        "ecc_sbe_agg_total": 0,
        "ecc_dbe_agg_total": 0,
        "retired_pages_sbe": "not_supported",
        "retired_pages_dbe": "not_supported",
        "retired_pages_pending": "not_supported",
    }
    _run(model, 4)
    assert _reading(model).gpu_info == []  # nothing changed: not described again
    _run(model, 7, start=4)
    again = _reading(model)
    assert {i["gpu"]: i["memory_errors"]["ecc_dbe_agg_total"] for i in again.gpu_info}[3] == 1
    assert _reading(model).gpu_info == []


def test_the_reset_step_is_a_gpu_reset_event() -> None:
    model = _site(["gpu-xid:gpu-a01-01/2@1", "gpu-reset:gpu-a01-01/2@10"])
    _run(model, 5)
    _reading(model)
    _run(model, 12, start=5)
    events = _reading(model).events
    assert [(e["gpu"], e["kind"]) for e in events] == [(2, "gpu_reset")]
