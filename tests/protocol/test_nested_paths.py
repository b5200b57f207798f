"""A refusal names the exact field, however deep: an event whose `kind` is a list is
`events[0].kind`, not the whole batch (`$`), so an agent's author finds the fault."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.protocol.validate import Batch, ProtocolError, validate_batch
from tests.support.batches import NOW, batch, refused
from tests.support.fuzz import json_values

EVENT_KEYS = ["ts", "kind", "gpu", "code", "detail"]


def event(**fields: Any) -> dict[str, Any]:
    return {"ts": NOW - 1, "kind": "xid", "gpu": 0, "code": 79, **fields}


@pytest.mark.parametrize(
    ("kind", "got"),
    [(["xid"], "array"), ({"xid": 1}, "object"), (79, "number"), (None, "null")],
    ids=["a list", "an object", "a number", "null"],
)
def test_an_event_kind_of_the_wrong_type_is_refused_naming_events_kind(kind: Any, got: str) -> None:
    error = refused(batch(events=[event(), event(kind=kind)]))
    assert error.field == "events[1].kind"
    assert error.reason.endswith(f"got {got}")


def test_an_unknown_event_kind_is_named_in_the_reason() -> None:
    error = refused(batch(events=[event(kind="xidd")]))
    assert error.field == "events[0].kind" and "got 'xidd'" in error.reason


@pytest.mark.parametrize("block", ["events", "gpu_info"])
def test_an_item_that_is_not_an_object_is_refused_naming_its_position(block: Any) -> None:
    good = event() if block == "events" else {"gpu": 0}
    error = refused(batch(**{block: [good, ["not", "an", "object"]]}))
    assert error.field == f"{block}[1]" and error.reason == "must be an object, got array"


def test_a_block_that_is_not_a_list_is_refused_naming_the_block() -> None:
    assert refused(batch(events={"kind": "xid"})).field == "events"


@given(st.sampled_from(EVENT_KEYS), json_values)
def test_any_value_in_an_event_field_is_accepted_or_refused_naming_that_field(
    key: str, value: Any
) -> None:
    obj = batch(events=[event(**{key: value})])
    try:
        validate_batch(obj, NOW)
    except ProtocolError as exc:
        assert exc.field == f"events[0].{key}", (exc.field, exc.reason)


@given(json_values)
def test_any_value_as_an_event_is_accepted_or_refused_within_that_event(value: Any) -> None:
    try:
        answer: Batch | None = validate_batch(batch(events=[value]), NOW)
    except ProtocolError as exc:
        assert exc.field.startswith("events[0]"), (exc.field, exc.reason)
        answer = None
    assert answer is None or answer.events == [value]
