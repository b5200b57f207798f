"""The value stream both sides of bench/peer.py carry: the H200 capture replayed per GPU.

The trace is tests/data/nvml/h200/nvml_trace.csv (one H200 read with NVML at 4 Hz: idle,
~67 s of matmuls at the 700 W cap, cool-down; provenance in that folder's README.md). It is
taken at 1 Hz (the first row of each second) and looped; each GPU starts at its own offset into
it, so a fleet is not in lock-step. Counters (energy, violation time, ECC, PCIe replay) go
on rising across a loop: each loop adds the trace's own rise plus one step.

The fields are those both carry: a Fleetwatch agent's GPU metric and the dcgm-exporter
field that fleet/ingest/prometheus/mapping.py maps to it (the one owner of names and
units). One value per GPU per second, computed once: `dcgm(gpu, second)` is what the
exporter serves Prometheus, `fleetwatch(gpu, second)` the same numbers in Fleetwatch's
units (the mapping's scale), so the two sides store the same readings.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from agents.protocol.metrics import GPU_METRICS
from fleet.ingest.prometheus.mapping import FIELDS as DCGM_MAP

TRACE = Path(__file__).resolve().parent.parent / "tests/data/nvml/h200/nvml_trace.csv"
GOLDEN = (math.sqrt(5) - 1) / 2  # spreads the GPUs' offsets evenly over the loop

# (trace column, Fleetwatch metric, dcgm-exporter field, counter?)
_COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("util_gpu", "util_gpu_pct", False),
    ("util_mem", "util_mem_pct", False),
    ("mem_used_mib", "mem_used_mib", False),
    ("temp_gpu_c", "temp_gpu_c", False),
    ("temp_mem_c", "temp_mem_c", False),
    ("power_w", "power_w", False),
    ("energy_j", "energy_j", True),
    ("clock_sm_mhz", "clock_sm_mhz", False),
    ("clock_mem_mhz", "clock_mem_mhz", False),
    ("clocks_event_reasons", "clock_event_reasons", False),
    ("violation_power_ns", "violation_power_ns", True),
    ("violation_thermal_ns", "violation_thermal_ns", True),
    ("ecc_sbe_vol", "ecc_sbe_vol_total", True),
    ("ecc_dbe_vol", "ecc_dbe_vol_total", True),
    ("pcie_replay", "pcie_replay_total", True),
)


@dataclass(frozen=True, slots=True)
class Field:
    column: str  # the trace's column
    metric: str  # Fleetwatch's GPU metric
    dcgm: str  # dcgm-exporter's field (its metric name)
    scale: float  # Fleetwatch value = DCGM value × scale
    counter: bool
    integer: bool  # an integer column in Fleetwatch (agents/protocol/metrics.py)


def _fields() -> tuple[Field, ...]:
    # The first DCGM field mapped to each metric (clock_event_reasons has two names:
    # DCGM_FI_DEV_CLOCKS_EVENT_REASONS, the current one, comes first).
    by_metric: dict[str, tuple[str, float]] = {}
    for fm in DCGM_MAP:
        by_metric.setdefault(fm.metric, (fm.field, fm.scale))
    integer = {m.name: m.integer for m in GPU_METRICS}
    return tuple(
        Field(column, metric, *by_metric[metric], counter, integer[metric])
        for column, metric, counter in _COLUMNS
    )


FIELDS: tuple[Field, ...] = _fields()


class Stream:
    """The trace at 1 Hz, looped, per GPU: DCGM values (what dcgm-exporter serves)."""

    def __init__(self, origin: int, path: Path = TRACE) -> None:
        self.origin = origin  # the epoch second every GPU's loop is counted from
        with path.open(newline="") as handle:
            rows = _one_a_second(list(csv.DictReader(handle)))
        if len(rows) < 2:
            raise ValueError(f"{path}: fewer than two seconds of samples")
        self.period = len(rows)
        # Each field's DCGM value at each second of the loop, in DCGM units: integral
        # where DCGM's field is (mJ, µs, counts), as dcgm-exporter prints them.
        self.values: list[list[float]] = [
            [_to_dcgm(f, float(row[f.column] or 0)) for f in FIELDS] for row in rows
        ]
        first, last, before = self.values[0], self.values[-1], self.values[-2]
        self.rise = [
            (last[i] - first[i] + (last[i] - before[i])) if f.counter else 0.0
            for i, f in enumerate(FIELDS)
        ]

    def offset(self, gpu: int) -> int:
        """Where GPU number `gpu` (fleet-wide) is in the loop at second 0."""
        return int(gpu * GOLDEN * self.period) % self.period

    def dcgm(self, gpu: int, second: int) -> list[float]:
        """Every field's DCGM value for `gpu` at epoch `second`, in FIELDS order."""
        loops, at = divmod(second - self.origin + self.offset(gpu), self.period)
        row = self.values[at]
        return [v + loops * r if r else v for v, r in zip(row, self.rise, strict=True)]

    def fleetwatch(self, gpu: int, second: int) -> dict[str, float | int]:
        """The same reading in Fleetwatch's units, as an agent's sample carries it."""
        out: dict[str, float | int] = {}
        for f, v in zip(FIELDS, self.dcgm(gpu, second), strict=True):
            value = v * f.scale if f.scale != 1 else v
            out[f.metric] = round(value) if f.integer else value
        return out


def _one_a_second(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The first row of each second of the capture (it was read at ~4 Hz, its clock
    drifting a millisecond or so per second)."""
    kept: list[dict[str, str]] = []
    for row in rows:
        if int(float(row["t"])) == len(kept):
            kept.append(row)
    return kept


def _to_dcgm(field: Field, value: float) -> float:
    dcgm = value / field.scale
    rounded = round(dcgm)
    return float(rounded) if abs(dcgm - rounded) < 1e-6 or field.counter else dcgm
