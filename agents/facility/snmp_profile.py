"""SNMP device profiles: one JSON file per device family in `profiles/snmp/`.

A profile maps OIDs to protocol metrics with scale and unit, says how rows are
found (a fixed index, several indexes combined, or the row whose identity column
holds a given value), which raw values mean "not available" (APC's -1), and
which enumerations are faults worth a note. See docs/facility.md for the format.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.facility.units import wanted_unit

PROFILE_DIR = Path(__file__).resolve().parent / "profiles" / "snmp"
_COMBINE = ("first", "sum", "max", "mean")


@dataclass(frozen=True, slots=True)
class MetricSpec:
    metric: str
    column: str  # the OID without the row index
    indexes: tuple[str, ...]  # may hold "{device}"
    combine: str
    scale: float
    unit: str
    index_by: tuple[str, str] | None  # (identity column OID, value that marks the row)


@dataclass(frozen=True, slots=True)
class StateSpec:
    label: str
    column: str
    index: str
    notes: dict[int, str]


@dataclass(frozen=True, slots=True)
class SnmpProfile:
    name: str
    family: str
    feeds: tuple[str, ...]
    default_device: str
    absent_values: frozenset[int]
    metrics: tuple[MetricSpec, ...]
    states: tuple[StateSpec, ...]


def load_profile(name: str, directory: Path = PROFILE_DIR) -> SnmpProfile:
    path = directory / f"{name}.json"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in directory.glob("*.json")))
        raise ValueError(f"no SNMP profile {name!r} (known: {known})")
    raw: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return SnmpProfile(
        name=name,
        family=str(raw["family"]),
        feeds=tuple(raw.get("feeds", ())),
        default_device=str(raw.get("default_device", "1")),
        absent_values=frozenset(int(v) for v in raw.get("absent_values", ())),
        metrics=tuple(_metric(metric, spec) for metric, spec in raw["metrics"].items()),
        states=tuple(_state(spec) for spec in raw.get("states", ())),
    )


def _metric(metric: str, spec: dict[str, Any]) -> MetricSpec:
    combine = str(spec.get("combine", "first"))
    if combine not in _COMBINE:
        raise ValueError(f"{metric}: combine must be one of {_COMBINE}")
    index_by = spec.get("index_by")
    indexes = spec.get("indexes") or [spec.get("index", "")]
    return MetricSpec(
        metric=metric,
        column=_oid(spec["oid"]),
        indexes=tuple(str(i) for i in indexes),
        combine=combine,
        scale=float(spec.get("scale", 1.0)),
        unit=str(spec.get("unit", wanted_unit(metric))),
        index_by=(_oid(index_by["column"]), _oid(index_by["value"])) if index_by else None,
    )


def _state(spec: dict[str, Any]) -> StateSpec:
    return StateSpec(
        label=str(spec["label"]),
        column=_oid(spec["oid"]),
        index=str(spec["index"]),
        notes={int(k): str(v) for k, v in spec["values"].items()},
    )


def _oid(text: str) -> str:
    return text.strip().lstrip(".")
