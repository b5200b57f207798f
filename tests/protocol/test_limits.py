"""What one batch may carry (issue 11): GPUs described, events, and the size and depth of
the free-form blocks; past each, a 400 naming the limit."""

from __future__ import annotations

from typing import Any

import pytest

from agents.protocol import (
    MAX_EVENTS_PER_BATCH,
    MAX_GPUS_PER_NODE,
    MAX_INFO_BYTES,
    MAX_INFO_DEPTH,
)
from agents.protocol.validate import validate_batch
from tests.support.batches import NOW, batch, refused


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def test_a_gpu_info_of_1016_gpus_is_refused() -> None:
    error = refused(batch(gpu_info=[{"gpu": i} for i in range(1016)]))
    assert error.field == "gpu_info" and f"at most {MAX_GPUS_PER_NODE}" in error.reason


def test_gpu_info_up_to_the_limit_passes() -> None:
    validate_batch(batch(gpu_info=[{"gpu": i} for i in range(MAX_GPUS_PER_NODE)]), NOW)


def test_one_gpu_described_twice_is_refused_naming_both() -> None:
    error = refused(batch(gpu_info=[{"gpu": 0}, {"gpu": 1}, {"gpu": 0}]))
    assert error.field == "gpu_info[2].gpu"
    assert error.reason == "gpu_info[0] and gpu_info[2] both describe GPU 0"


def test_too_many_events_are_refused() -> None:
    events = [{"ts": NOW, "kind": "note"}] * (MAX_EVENTS_PER_BATCH + 1)
    error = refused(batch(events=events))
    assert error.field == "events" and f"at most {MAX_EVENTS_PER_BATCH}" in error.reason
    validate_batch(batch(events=events[:MAX_EVENTS_PER_BATCH]), NOW)


@pytest.mark.parametrize("name", ["node_info", "agent"])
def test_an_info_block_over_the_size_limit_is_refused(name: str) -> None:
    error = refused(batch(**{name: {"blob": "x" * MAX_INFO_BYTES}}))
    assert error.field == name and f"at most {MAX_INFO_BYTES}" in error.reason


@pytest.mark.parametrize("name", ["node_info", "agent"])
def test_an_info_block_nested_too_deep_is_refused(name: str) -> None:
    error = refused(batch(**{name: nested(MAX_INFO_DEPTH + 1)}))
    assert error.field == name and "nested deeper" in error.reason
    validate_batch(batch(**{name: nested(MAX_INFO_DEPTH)}), NOW)


def test_gpu_info_depth_counts_its_list() -> None:
    assert refused(batch(gpu_info=[{"gpu": 0, "x": nested(MAX_INFO_DEPTH)}])).field == "gpu_info"
    validate_batch(batch(gpu_info=[{"gpu": 0, "x": nested(MAX_INFO_DEPTH - 2)}]), NOW)
