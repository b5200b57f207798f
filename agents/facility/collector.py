"""The collector every facility target runs: read the device, clean, stamp, remember.

A protocol module supplies `read()`; this base turns its values into protocol-v1
samples for the target's entity, drops values outside the catalogue's plausible
range (a garbage register must not become a 60 MW rack), records the outcome in
`status`, and keeps the latest values for the site's rack-power and PUE sums.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agents.collectors.base import Reading
from agents.facility.config import Target
from agents.facility.status import TargetError, TargetStatus, log_transition
from agents.protocol.metrics import METRICS

# Meter values are kept under these names; they are not sent as samples themselves.
METER_SPECS: dict[str, tuple[float, float]] = {"power_w": (0.0, 1e10), "energy_kwh": (0.0, 1e13)}


@dataclass(slots=True)
class DeviceReading:
    """What one poll of a device gave, in protocol units and names."""

    values: dict[str, float]
    notes: list[str] = field(default_factory=list)  # faults the device reports about itself
    answered_by: str = ""  # which path/profile answered


@dataclass(frozen=True, slots=True)
class Latest:
    ts: float
    values: dict[str, float]


def plausible_ranges(entity_kind: str) -> dict[str, tuple[float, float]]:
    if entity_kind == "meter":
        return METER_SPECS
    return {m.name: (m.lo, m.hi) for m in METRICS[entity_kind]}  # type: ignore[index]


def clean(entity_kind: str, values: dict[str, float]) -> tuple[dict[str, float], list[str]]:
    """Keep known, in-range values; say which were dropped and why."""
    ranges = plausible_ranges(entity_kind)
    kept: dict[str, float] = {}
    dropped: list[str] = []
    for name, value in values.items():
        bounds = ranges.get(name)
        if bounds is None:
            continue  # a reading this entity kind has no field for
        if not bounds[0] <= value <= bounds[1]:  # False for NaN too
            dropped.append(f"{name}={value:g} is implausible, dropped")
            continue
        kept[name] = round(value, 3)
    return kept, dropped


class TargetCollector:
    """Base for one facility target; subclasses implement `read()` and maybe setup/close."""

    protocol = ""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.name = f"facility:{target.name}"
        self.interval_s = target.interval_s
        self.status = TargetStatus()
        self.latest: Latest | None = None

    def setup(self) -> None:
        """Nothing to open up front: connections are made lazily and remade after failures."""

    def read(self) -> DeviceReading:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def describe(self) -> str:
        return f"{self.target.name} ({self.protocol} {self.target.address}, {self.target.profile})"

    def collect(self, now: float) -> Reading:
        before = self.status.state
        reading = Reading()
        try:
            device = self.read()
        except TargetError as error:
            self.status.record_failure(error)
            log_transition(self.describe(), before, self.status)
            return reading
        except Exception as exc:  # a library's surprise must not stop the other targets
            self.status.record_failure(
                TargetError("internal_error", f"{type(exc).__name__}: {exc}")
            )
            log_transition(self.describe(), before, self.status)
            return reading
        kind = self.target.feeds.kind
        values, dropped = clean(kind, device.values)
        self.status.record_ok(now, len(values), device.answered_by, device.notes + dropped)
        log_transition(self.describe(), before, self.status)
        self.latest = Latest(now, values)
        if kind != "meter" and values:
            sample: dict[str, Any] = {"ts": now, **self.target.feeds.keys(), **values}
            reading.add(kind, sample)
        return reading

    def fresh(self, now: float) -> dict[str, float] | None:
        """The latest values if read within three cadences (a missed poll is tolerated)."""
        if self.latest is None or now - self.latest.ts > 3 * self.interval_s:
            return None
        return self.latest.values
