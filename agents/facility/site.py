"""Site sums from the targets' latest readings: rack power from PDU feeds, PUE from meters.

PUE = total facility power (the utility meters) / IT power. Where IT power is
measured decides its ISO/IEC 30134-2 category, and the category travels with the
figure (`pue_category`) so it is shown wherever PUE is:

- category 3: IT equipment input (BMC node power, `meter:it_input`),
- category 2: PDU outputs (every `feed:` target, plus `meter:pdu_output`),
- category 1: UPS output (`meter:ups_output`).

Cooling plant meters (`meter:cooling`) give `cooling_power_w`.

The most accurate category whose meters all answered recently is used; a sum
with a meter missing would understate IT power and flatter PUE, so a partial set
is never summed. The same rule holds for rack power: every feed of the rack, or
no figure.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from agents.facility.collector import TargetCollector, clean

IT_SOURCES = ((3, "IT equipment inputs"), (2, "PDU outputs"), (1, "UPS output"))


@dataclass(slots=True)
class SitePower:
    facility: dict[str, float] = field(default_factory=dict)
    it_source: str = ""
    racks: dict[str, dict[str, float]] = field(default_factory=dict)
    rack_budgets_w: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def it_category_members(
    collectors: Sequence[TargetCollector], category: int
) -> list[TargetCollector]:
    role = {3: "it_input", 2: "pdu_output", 1: "ups_output"}[category]
    found = [
        c for c in collectors if c.target.feeds.kind == "meter" and c.target.feeds.name == role
    ]
    if category == 2:
        found += [c for c in collectors if c.target.feeds.kind == "feed"]
    return found


def site_power(collectors: Sequence[TargetCollector], now: float) -> SitePower:
    result = SitePower()
    utility = [
        c for c in collectors if c.target.feeds.kind == "meter" and c.target.feeds.name == "utility"
    ]
    total = _sum_all(utility, now, "power_w")
    values: dict[str, float] = {}
    if total is not None:
        values["total_power_w"] = total
        _put(values, "total_energy_kwh", _sum_all(utility, now, "energy_kwh"))
    elif utility:
        result.notes.append("total power unknown: a utility meter did not answer")
    cooling = [
        c for c in collectors if c.target.feeds.kind == "meter" and c.target.feeds.name == "cooling"
    ]
    _put(values, "cooling_power_w", _sum_all(cooling, now, "power_w"))
    for category, source in IT_SOURCES:
        members = it_category_members(collectors, category)
        it_power = _sum_all(members, now, "power_w")
        if it_power is None:
            continue
        values["it_power_w"] = it_power
        values["pue_category"] = category
        _put(values, "it_energy_kwh", _sum_all(members, now, "energy_kwh"))
        result.it_source = f"{source} ({len(members)} meters)"
        break
    if "total_power_w" in values and values.get("it_power_w"):
        values["pue"] = round(values["total_power_w"] / values["it_power_w"], 4)
    result.facility, dropped = clean("facility", values)
    result.notes += dropped
    _rack_power(collectors, now, result)
    return result


def _rack_power(collectors: Sequence[TargetCollector], now: float, result: SitePower) -> None:
    feeds: dict[str, list[TargetCollector]] = defaultdict(list)
    for collector in collectors:
        if collector.target.feeds.kind == "feed":
            feeds[collector.target.feeds.name].append(collector)
    for rack, members in sorted(feeds.items()):
        budgets = [
            float(m.target.option("budget_w")) for m in members if m.target.option("budget_w")
        ]
        if budgets:
            result.rack_budgets_w[rack] = max(budgets)
        power = _sum_all(members, now, "power_w")
        if power is not None:
            result.racks[rack] = {"power_w": round(power, 1)}
            _put(result.racks[rack], "energy_kwh", _sum_all(members, now, "energy_kwh"))


def _sum_all(members: Sequence[TargetCollector], now: float, metric: str) -> float | None:
    """The sum over every member, or None if any member lacks a fresh reading of it."""
    if not members:
        return None
    total = 0.0
    for member in members:
        values = member.fresh(now)
        if values is None or metric not in values:
            return None
        total += values[metric]
    return total


def _put(values: dict[str, float], name: str, value: float | None) -> None:
    if value is not None:
        values[name] = value


def describe(power: SitePower) -> list[str]:
    """Lines for `fleet-agent check`."""
    lines: list[str] = []
    facility = power.facility
    if facility:
        parts = []
        if "total_power_w" in facility:
            parts.append(f"total {facility['total_power_w'] / 1000:.1f} kW")
        if "it_power_w" in facility:
            category = int(facility["pue_category"])
            parts.append(f"IT {facility['it_power_w'] / 1000:.1f} kW from {power.it_source}")
            pue = f"PUE {facility['pue']:.2f}" if "pue" in facility else "PUE unknown"
            parts.append(f"{pue} (category {category})")
        if "cooling_power_w" in facility:
            parts.append(f"cooling {facility['cooling_power_w'] / 1000:.1f} kW")
        lines.append("site: " + ", ".join(parts))
    for rack, values in power.racks.items():
        line = f"rack {rack}: {values['power_w'] / 1000:.1f} kW, the sum of its PDU feeds"
        budget = power.rack_budgets_w.get(rack)
        if budget:
            line += f"; budget {budget / 1000:.1f} kW ({100 * values['power_w'] / budget:.0f}%)"
        lines.append(line)
    lines += [f"site: {note}" for note in power.notes]
    return lines
