"""Which of a GPU's own limits is in force, and where it came from.

A GPU's limits have two sources, kept apart (fleet/models/nodes.py): the value an operator
*entered* (inventory import or admin) and the value its agent *reported* in `gpu_info`.
The limit in force is the entered one when set, else the reported one (docs/inventory.md):
an operator enters a limit exactly where the agent cannot report it, or reports it wrong.
An agent never writes the entered value, so a `gpu_info` without limits cannot erase it.

This module is the rule's one owner in Python; `fleet.read.summaries_sql` mirrors it as
`COALESCE(entered, reported)` and tests/fleet/test_summaries_sql.py holds the two equal.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

from fleet.health.levels import GpuLimits

# The limits kept per GPU, each in two columns: `<name>` (entered) and `reported_<name>`.
STORED_LIMITS = (
    "slowdown_c",
    "shutdown_c",
    "gpu_max_c",
    "mem_max_c",
    "tlimit_slowdown_c",
    "power_limit_max_w",
)


# Each stored limit in words, with its unit (pages and the admin).
LIMIT_LABELS = {
    "slowdown_c": ("slowdown", "°C"),
    "shutdown_c": ("shutdown", "°C"),
    "gpu_max_c": ("max operating", "°C"),
    "mem_max_c": ("HBM max", "°C"),
    "tlimit_slowdown_c": ("slowdown as a T.Limit offset", "°C"),
    "power_limit_max_w": ("max power limit", "W"),
}


def reported_column(name: str) -> str:
    """The column that keeps what the agent reported for limit `name`."""
    return f"reported_{name}"


class Origin(enum.Enum):
    """Where a limit in force came from, in the words pages and the admin show."""

    INVENTORY = "inventory"
    REPORTED = "reported by the agent"


@dataclass(frozen=True, slots=True)
class Limit:
    value: float | None
    origin: Origin | None  # None when neither source has a value


def limit_in_force(entered: float | None, reported: float | None) -> Limit:
    """The entered value when set, else the reported one."""
    if entered is not None:
        return Limit(float(entered), Origin.INVENTORY)
    if reported is not None:
        return Limit(float(reported), Origin.REPORTED)
    return Limit(None, None)


def limits_in_force(entered: GpuLimits, reported: GpuLimits) -> GpuLimits:
    """Every limit of a GPU by `limit_in_force`, as the judges in `fleet.health` take them."""
    chosen = {
        f.name: limit_in_force(getattr(entered, f.name), getattr(reported, f.name)).value
        for f in dataclasses.fields(GpuLimits)
    }
    return GpuLimits(**chosen)


@dataclass(frozen=True, slots=True)
class Difference:
    name: str
    entered: float
    reported: float


def differences(entered: GpuLimits, reported: GpuLimits) -> list[Difference]:
    """The limits both sources have, with different values (the entered one is in force)."""
    out = []
    for f in dataclasses.fields(GpuLimits):
        mine, theirs = getattr(entered, f.name), getattr(reported, f.name)
        if mine is not None and theirs is not None and float(mine) != float(theirs):
            out.append(Difference(f.name, float(mine), float(theirs)))
    return out
