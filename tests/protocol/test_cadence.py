"""A batch declares its source's cadence (`cadence`: docs/protocol.md): taken when sane,
refused naming the exact field when not, and absent from an older agent."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from agents.protocol import cadence, schema
from agents.protocol.validate import validate_batch
from tests.support.batches import NOW, batch, refused


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


def test_slower_fields_are_declared_with_their_own_interval() -> None:
    declared = cadence(1, fields_s={"pcie_tx_kib_s": 300, "energy_j": 30})
    assert declared["fields_s"] == {"energy_j": 30.0, "pcie_tx_kib_s": 300.0}
    jsonschema.validate(batch(cadence=declared), schema.batch_schema())
    validated = validate_batch(batch(cadence=declared), NOW)
    assert validated.fields_s == {"energy_j": 30.0, "pcie_tx_kib_s": 300.0}
    assert validate_batch(batch(cadence=cadence(1)), NOW).fields_s == {}


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        (None, "cadence.fields_s", "null"),
        ([1], "cadence.fields_s", "must be an object"),
        ({"pcie_tx_kbps": 300}, "cadence.fields_s.pcie_tx_kbps", "unknown metric"),
        ({"energy_j": "30"}, "cadence.fields_s.energy_j", "got str"),
        ({"energy_j": 0.5}, "cadence.fields_s.energy_j", "shorter than sample_s 1 s"),
        ({"energy_j": 1e9}, "cadence.fields_s.energy_j", "outside"),
    ],
)
def test_a_bad_slower_field_is_refused_naming_it(fields: Any, field: str, words: str) -> None:
    error = refused(batch(cadence={"sample_s": 1, "batch_s": 1, "fields_s": fields}))
    assert error.field == field
    assert words in error.reason
