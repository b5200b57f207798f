"""What a rule's signal is (fleet/alerts/signals.py holds the catalogue): its name and
scope, its unit, where the engine gets its value, and the parameters a rule may pass it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

ParamType = Literal["float", "int_list", "metric_list", "site_map"]


@dataclass(frozen=True, slots=True)
class Param:
    """A parameter a rule passes to its signal (`AlertRule.params`)."""

    name: str
    type: ParamType
    default: float | tuple[int, ...] | tuple[str, ...] | None
    help: str


@dataclass(frozen=True, slots=True)
class Signal:
    name: str
    scope: str
    unit: str  # "" for counts and ratios without a unit; "flag" for 0/1
    description: str
    source: str  # metric:<name> | events:<kind> | … (fleet/alerts/signals.py says each)
    params: tuple[Param, ...] = ()
    placeholders: tuple[str, ...] = field(default=())  # extra ones this signal supplies
    # No value means the condition is over (nothing holds the GPU any more), not that the
    # data is missing: a firing instance resolves instead of firing on no data.
    absent_clears: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.scope, self.name)

    @property
    def raw_metric(self) -> str | None:
        return self.source.removeprefix("metric:") if self.source.startswith("metric:") else None

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


# Shared by the event-counting signals and the fabric flaps.
WINDOW = Param("window_s", "float", 600.0, "seconds of events counted (the rule clears after)")
