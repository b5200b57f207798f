"""The ingest child's typed fast path (fleet/ingest/fast_decode.py) and the full path
(`orjson.loads`, then `validate_batch`) give every body the same answer: the fast path
accepts only what the full path accepts, as the same batch, and leaves every refusal to
the full path, so refusals read exactly as before."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given

from agents.protocol.validate import Batch, ProtocolError, validate_batch
from fleet.ingest.fast_decode import fast_batch
from tests.support.fuzz import batches, good_batch, json_values

NOW = time.time()


def full_path(body: bytes, now: float) -> Batch | ProtocolError:
    try:
        return validate_batch(orjson.loads(body), now)
    except (ProtocolError, orjson.JSONDecodeError) as exc:
        return exc if isinstance(exc, ProtocolError) else ProtocolError(400, "$", str(exc))


def assert_same_answer(body: bytes, now: float) -> Batch | None:
    """The fast path's batch equals the full path's, or it stands aside (None)."""
    fast = fast_batch(body, now)
    full = full_path(body, now)
    if fast is not None:
        assert isinstance(full, Batch), f"fast path accepted what the full path refuses: {full}"
        assert fast == full  # values compare as numbers: 60 == 60.0
    return fast


def agent_tick(now: float = NOW, gpus: int = 8) -> dict[str, Any]:
    """What a node agent sends each second (agents/outbox.py): cadence, agent block."""
    sample = {"util_gpu_pct": 97.0, "temp_gpu_c": 61, "power_w": 689.5, "pstate": 0}
    sample["violation_power_ns"] = 60_000_000_000  # past 32 bits, as a long-run counter is
    return {
        "protocol": 1,
        "source": "node:n1",
        "seq": 7,
        "sent_at": round(now, 3),
        "cadence": {"sample_s": 1, "batch_s": 1},
        "gpu": [
            {
                "ts": now - 1,
                "gpu": i,
                **sample,
                "energy_j": 1e6 + i,
                "violation_power_ns": 60_000_000_000,
            }
            for i in range(gpus)
        ],
        "node": [{"ts": now - 1, "cpu_pct": 12.5}],
        "agent": {"version": "1.4.0", "spooled": 0, "dropped": 0},
    }


def test_an_agents_usual_tick_takes_the_fast_path_as_the_same_batch() -> None:
    batch = assert_same_answer(orjson.dumps(agent_tick()), NOW)
    assert batch is not None and batch.gpu_samples == 8 and batch.sample_s == 1.0


def test_a_batch_with_inventory_and_events_is_still_accepted_alike() -> None:
    body = agent_tick()
    body["gpu_info"] = [{"gpu": 0, "uuid": "GPU-1", "model": "H200", "limits": {}}]
    body["events"] = [{"ts": NOW - 1, "kind": "xid", "gpu": 0, "code": 79}]
    assert assert_same_answer(orjson.dumps(body), NOW) is not None


def test_free_form_blocks_keep_the_full_paths_numbers() -> None:
    """An integer past 64 bits in the agent block: orjson makes it a float, and so does the
    fast path (msgspec alone would keep an int that storage cannot serialise)."""
    body = orjson.dumps(agent_tick()).replace(b'"dropped":0', b'"dropped":1180591620717411303424')
    batch = assert_same_answer(body, NOW)
    assert batch is not None and batch.agent is not None
    assert type(batch.agent["dropped"]) is float  # as the full path has it (2**70 == 2.0**70)


FAULTS: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("out of range", lambda s: s.update(power_w=-5)),
    ("a fraction in an integer field", lambda s: s.update(pstate=1.5)),
    ("a whole float in an integer field", lambda s: s.update(pstate=2.0)),
    ("a boolean", lambda s: s.update(temp_gpu_c=True)),
    ("an int32 DCGM blank", lambda s: s.update(energy_j=2147483633)),
    ("an fp64 DCGM blank", lambda s: s.update(energy_j=140737488355328.0)),
    ("a day and more old", lambda s: s.update(ts=NOW - 90_000)),
    ("from the future", lambda s: s.update(ts=NOW + 600)),
    ("an unknown metric", lambda s: s.update(bogus_w=1)),
    ("a null", lambda s: s.update(power_w=None)),
    ("a GPU index out of range", lambda s: s.update(gpu=4096)),
    ("no ts", lambda s: s.pop("ts")),
    ("the same GPU twice", lambda s: s.update(gpu=0)),
]


@pytest.mark.parametrize(("what", "spoil"), FAULTS, ids=[f[0] for f in FAULTS])
def test_a_spoiled_sample_is_answered_as_the_full_path_answers_it(
    what: str, spoil: Callable[[dict[str, Any]], None]
) -> None:
    body = agent_tick()
    spoil(body["gpu"][5])
    assert_same_answer(orjson.dumps(body), NOW)


def test_a_refusal_is_left_to_the_full_path_which_words_it() -> None:
    body = agent_tick()
    body["gpu"][5]["ts"] = NOW + 600
    assert fast_batch(orjson.dumps(body), NOW) is None
    refused = full_path(orjson.dumps(body), NOW)
    assert isinstance(refused, ProtocolError) and refused.field == "gpu[5].ts"


@given(batches())
def test_any_near_valid_batch_gets_the_same_answer(obj: Any) -> None:
    assert_same_answer(json.dumps(obj).encode(), time.time())


@given(json_values)
def test_any_json_value_gets_the_same_answer(obj: Any) -> None:
    assert_same_answer(json.dumps(obj).encode(), time.time())


def test_not_json_at_all_is_left_to_the_full_path() -> None:
    assert fast_batch(b'{"protocol": 1, "source": ', NOW) is None
    assert fast_batch(json.dumps(good_batch("n1", 1)).encode()[:-1], NOW) is None
