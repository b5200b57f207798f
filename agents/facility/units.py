"""Unit spellings seen on real devices, normalised to the protocol's units.

Redfish sensors use UCUM (`W`, `kW`, `Cel`, `kW.h`, `L/min`, `kPa`), DMTF's own
PDU examples say `C`, legacy Thermal fans say `RPM`/`Percent`, and some BMCs
(Gigabyte `Sensors/Power`) send no unit at all. A missing unit means "the
schema's unit" (the property name states it), so it passes through unchanged.
"""

from __future__ import annotations

import math

# spelling (lower-cased) -> (canonical unit, factor to it)
_UNITS: dict[str, tuple[str, float]] = {
    "w": ("W", 1.0),
    "watt": ("W", 1.0),
    "watts": ("W", 1.0),
    "kw": ("W", 1000.0),
    "mw": ("W", 1e6),
    "cel": ("C", 1.0),
    "c": ("C", 1.0),
    "°c": ("C", 1.0),
    "degc": ("C", 1.0),
    "celsius": ("C", 1.0),
    "kw.h": ("kWh", 1.0),
    "kwh": ("kWh", 1.0),
    "w.h": ("kWh", 0.001),
    "wh": ("kWh", 0.001),
    "j": ("kWh", 1 / 3.6e6),
    "a": ("A", 1.0),
    "ma": ("A", 0.001),
    "v": ("V", 1.0),
    "kpa": ("kPa", 1.0),
    "pa": ("kPa", 0.001),
    "bar": ("kPa", 100.0),
    "l/min": ("L/min", 1.0),
    "lpm": ("L/min", 1.0),
    "%": ("%", 1.0),
    "percent": ("%", 1.0),
    "hz": ("Hz", 1.0),
}

# Fahrenheit is affine, not a factor.
_FAHRENHEIT = frozenset({"f", "°f", "degf", "fahrenheit", "[degf]"})


class UnitMismatch(ValueError):
    """A reading in a unit that cannot be turned into the one wanted."""


def to_unit(value: float, unit: str | None, wanted: str) -> float:
    """Convert `value` given in `unit` (any known spelling; None = already `wanted`)."""
    if unit is None or unit.strip() == "":
        return value
    spelling = unit.strip().lower()
    if spelling in _FAHRENHEIT:
        if wanted != "C":
            raise UnitMismatch(f"{unit} is not convertible to {wanted}")
        return (value - 32.0) * 5.0 / 9.0
    known = _UNITS.get(spelling)
    if known is None or known[0] != wanted:
        raise UnitMismatch(f"{unit!r} is not convertible to {wanted}")
    return value * known[1]


def as_number(value: object) -> float | None:
    """A finite JSON number, or None for anything else (null, strings, bools, NaN)."""
    if type(value) is not int and type(value) is not float:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


_WANTED_UNIT = {
    "_w": "W",
    "_kw": "kW",
    "_c": "C",
    "_kwh": "kWh",
    "_a": "A",
    "_v": "V",
    "_pct": "%",
    "_lpm": "L/min",
    "_kpa": "kPa",
}


def wanted_unit(metric: str) -> str:
    """The protocol unit a metric name carries (`power_w` -> W)."""
    for suffix, unit in _WANTED_UNIT.items():
        if metric.endswith(suffix):
            return unit
    raise ValueError(f"metric {metric!r} has no unit suffix")


def combine(how: str, numbers: list[float]) -> float:
    """Several rows of one reading (phases, lines) into one: first, sum, max or mean."""
    if how == "sum":
        return sum(numbers)
    if how == "max":
        return max(numbers)
    if how == "mean":
        return sum(numbers) / len(numbers)
    return numbers[0]
