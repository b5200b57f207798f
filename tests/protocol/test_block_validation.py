"""A tick's samples are checked as one block when they share a shape; a fault anywhere
in the block must still be refused, naming the sample and field, as one by one."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from agents.protocol.validate import ProtocolError, validate_batch

NOW = time.time()


def tick(gpus: int = 8) -> dict[str, Any]:
    sample = {"util_gpu_pct": 97.0, "temp_gpu_c": 61, "power_w": 689.5, "pstate": 0}
    samples = [{"ts": NOW - 1, "gpu": i, **sample, "energy_j": 1e6 + i} for i in range(gpus)]
    return {"protocol": 1, "source": "node:n1", "seq": 1, "gpu": samples}


def test_a_valid_tick_passes_as_it_was_sent() -> None:
    batch = tick()
    assert validate_batch(batch, NOW).samples["gpu"] == batch["gpu"]


FAULTS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("out of range", lambda s: s.update(power_w=-5), "power_w"),
    ("a fraction in an integer field", lambda s: s.update(pstate=1.5), "pstate"),
    ("a boolean", lambda s: s.update(temp_gpu_c=True), "temp_gpu_c"),
    ("a DCGM blank", lambda s: s.update(energy_j=140737488355328.0), "energy_j"),
    ("a day and more old", lambda s: s.update(ts=NOW - 90_000), "ts"),
    ("from the future", lambda s: s.update(ts=NOW + 600), "ts"),
    ("an unknown metric", lambda s: s.update(bogus_w=1), "bogus_w"),
    ("a null", lambda s: s.update(power_w=None), "power_w"),
    ("a GPU index out of range", lambda s: s.update(gpu=4096), "gpu"),
]


@pytest.mark.parametrize(("what", "spoil", "field"), FAULTS, ids=[f[0] for f in FAULTS])
def test_one_bad_sample_in_a_block_is_refused_naming_it(
    what: str, spoil: Callable[[dict[str, Any]], None], field: str
) -> None:
    batch = tick()
    spoil(batch["gpu"][5])
    with pytest.raises(ProtocolError) as refused:
        validate_batch(batch, NOW)
    assert refused.value.field == f"gpu[5].{field}", what


def test_a_block_with_a_sample_that_is_not_an_object_is_refused() -> None:
    batch = tick()
    batch["gpu"][3] = ["ts", "gpu", "util_gpu_pct", "temp_gpu_c", "power_w", "pstate", "energy_j"]
    with pytest.raises(ProtocolError) as refused:
        validate_batch(batch, NOW)
    assert refused.value.field == "gpu[3]"


def test_a_whole_float_in_an_integer_field_is_stored_as_an_integer() -> None:
    batch = tick()
    batch["gpu"][2]["pstate"] = 2.0
    assert validate_batch(batch, NOW).samples["gpu"][2]["pstate"] == 2
