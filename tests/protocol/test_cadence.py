"""A batch declares its source's cadence (`cadence`: docs/protocol.md): taken when sane,
refused naming the exact field when not, and absent from an older agent."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from agents.protocol import cadence, schema
from agents.protocol.validate import validate_batch
from tests.protocol.batches import NOW, batch, refused


@pytest.mark.parametrize(("sample_s", "batch_s"), [(1, 1), (1.0, 5.0), (5, 5), (15.0, 15.0)])
def test_a_declared_cadence_is_taken(sample_s: float, batch_s: float) -> None:
    obj = batch(cadence={"sample_s": sample_s, "batch_s": batch_s})
    jsonschema.validate(obj, schema.batch_schema())
    validated = validate_batch(obj, NOW)
    assert (validated.sample_s, validated.batch_s) == (float(sample_s), float(batch_s))


def test_an_older_agent_declares_nothing() -> None:
    validated = validate_batch(batch(), NOW)
    assert validated.sample_s is None and validated.batch_s is None


def test_the_helper_builds_one_batch_per_sample_by_default() -> None:
    assert cadence(5) == {"sample_s": 5.0, "batch_s": 5.0}
    assert cadence(1, 5) == {"sample_s": 1.0, "batch_s": 5.0}


@pytest.mark.parametrize(
    ("value", "field", "words"),
    [
        ([1, 1], "cadence", "must be an object"),
        ({"sample_s": 1}, "cadence.batch_s", "required"),
        ({"batch_s": 1}, "cadence.sample_s", "required"),
        ({"sample_s": None, "batch_s": 1}, "cadence.sample_s", "null"),
        ({"sample_s": 1, "batch_s": 1, "jitter_s": 0}, "cadence.jitter_s", "unknown"),
        ({"sample_s": True, "batch_s": 1}, "cadence.sample_s", "got bool"),
        ({"sample_s": "1", "batch_s": 1}, "cadence.sample_s", "got str"),
        ({"sample_s": 0, "batch_s": 1}, "cadence.sample_s", "outside [0.01, 3600]"),
        ({"sample_s": 1, "batch_s": 86400}, "cadence.batch_s", "outside [0.01, 3600]"),
        ({"sample_s": float("nan"), "batch_s": 1}, "cadence.sample_s", "outside"),
        ({"sample_s": 5, "batch_s": 1}, "cadence.batch_s", "shorter than sample_s 5 s"),
    ],
)
def test_a_bad_cadence_is_refused_naming_the_field(value: Any, field: str, words: str) -> None:
    error = refused(batch(cadence=value))
    assert error.field == field
    assert words in error.reason
