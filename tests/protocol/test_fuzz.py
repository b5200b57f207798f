"""The validator, fuzzed: for any decoded body it returns a batch or raises a
ProtocolError with a 4xx code and a field; nothing else escapes it."""

from __future__ import annotations

import json
import time
from typing import Any

import orjson
from hypothesis import given

from agents.protocol.validate import Batch, ProtocolError, validate_batch
from tests.support.fuzz import batches, json_values


def _answer(obj: Any) -> Batch | ProtocolError:
    try:
        return validate_batch(obj, time.time())
    except ProtocolError as exc:
        assert 400 <= exc.code < 500 and isinstance(exc.field, str) and exc.reason
        return exc


@given(batches())
def test_any_near_valid_batch_is_a_batch_or_a_4xx(obj: Any) -> None:
    _answer(obj)


@given(json_values)
def test_any_json_value_is_a_batch_or_a_4xx(obj: Any) -> None:
    _answer(obj)


@given(batches())
def test_what_the_validator_accepts_can_be_stored_as_json(obj: Any) -> None:
    """An accepted batch's free-form blocks serialise (what storage does with them). The
    body is decoded as the server decodes it (orjson: integers past 64 bits become floats)."""
    answer = _answer(orjson.loads(json.dumps(obj)))
    if isinstance(answer, Batch):
        for block in (answer.gpu_info, answer.node_info, answer.agent, answer.events):
            orjson.dumps(block)
