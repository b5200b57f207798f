"""The DCGM → Fleetwatch mapping: units, blanks, and the docs' table kept in step."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.protocol.metrics import GPU_METRICS
from fleet.ingest.prometheus.mapping import FIELDS, INT64_BLANK, convert, is_blank

DOCS = Path(__file__).resolve().parents[2] / "docs" / "prometheus.md"


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 2_564_793_000, ("energy_j", 2_564_793.0)),
        ("DCGM_FI_DEV_POWER_VIOLATION", 1_500, ("violation_power_ns", 1_500_000)),
        ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", 36.0, ("clock_event_reasons", 36)),
        ("DCGM_FI_DEV_GPU_TEMP", 9223372036854775794, None),  # int64 blank
        ("DCGM_FI_DEV_POWER_USAGE", 140737488355328.0, None),  # fp64 blank
        ("DCGM_FI_DEV_SM_CLOCK", 2147483647, None),  # int32 blank
        ("DCGM_FI_DEV_GPU_UTIL", 140.0, None),  # outside the metric's range
        ("DCGM_FI_DEV_ENC_UTIL", 12.0, None),  # no Fleetwatch metric
    ],
)
def test_a_dcgm_reading_becomes_the_fleetwatch_value_or_nothing(
    field: str, value: float, expected: tuple[str, float] | None
) -> None:
    assert convert(field, value) == expected


def test_blanks_are_told_from_readings() -> None:
    assert is_blank(float("nan")) and is_blank(INT64_BLANK) and not is_blank(1e13)


def test_every_mapped_metric_is_a_gpu_metric_and_every_field_is_in_the_docs() -> None:
    names = {m.name for m in GPU_METRICS}
    docs = DOCS.read_text()
    for spec in FIELDS:
        assert spec.metric in names
        assert f"`{spec.field}`" in docs or spec.field.endswith("CLOCK_THROTTLE_REASONS")
