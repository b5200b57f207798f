"""A built-in rule as the pack states it (fleet/alerts/rulepack.py), and the fields a pack
sets: what the installer (fleet/alerts/install.py) merges into each rule by its stable key."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

# The fields a pack sets; `key`, `builtin` and `pack_values` are the installer's own.
# How a GPU rule's summary names its GPU.
GPU_NAME = "{node} GPU {gpu}"

# The label that routes a rule to the facilities team (docs/notifications.md).
FACILITY: dict[str, str] = {"team": "facilities"}

PACK_FIELDS: tuple[str, ...] = (
    "name",
    "description",
    "scope",
    "signal",
    "params",
    "comparison",
    "threshold",
    "clear_threshold",
    "for_duration",
    "severity",
    "labels",
    "summary",
    "runbook_url",
    "enabled",
)


@dataclass(frozen=True)
class RuleSpec:
    """One built-in rule; `for_s` in seconds. Reads as the rule table in docs/rules.md."""

    key: str
    name: str
    scope: str
    signal: str
    comparison: str
    threshold: float
    clear_threshold: float | None
    for_s: float
    severity: str
    summary: str
    description: str
    params: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    runbook_url: str = ""
    enabled: bool = True

    @property
    def for_duration(self) -> dt.timedelta:
        return dt.timedelta(seconds=self.for_s)

    def values(self) -> dict[str, Any]:
        """The pack's fields, JSON-ready (durations in seconds), as `pack_values` holds them."""
        return {name: _plain(getattr(self, name)) for name in PACK_FIELDS}


def _plain(value: Any) -> Any:
    return value.total_seconds() if isinstance(value, dt.timedelta) else value
