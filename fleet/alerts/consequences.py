"""What a failure does to the equipment it serves (docs/rules.md, "Grouping: consequences").

A cooling loop's incident (`loop:<id>`) or a rack's power incident (`rack:<id>:<rule>` of a
rack-power or feed rule) is a *cause*. While its group is open, these alerts join it as
*consequences* instead of opening incidents of their own:

- a cooling loop: a GPU of a rack it cools falling off the bus (`gpu_missing`,
  `gpu_lost_events`) or reporting a fatal XID (`xid_events`: XID 79 when it shut down hot),
  when that GPU had a thermal alert (headroom, slowdown, a temperature; any state) that
  started within ATTRIBUTION_WINDOW — it was at or near its slowdown limit shortly before;
  a node of a rack it cools going silent (`agent_silent_intervals`);
- a rack's power: a node of that rack going silent and a GPU of that rack falling off the
  bus or reporting a fatal XID (no thermal condition: the power went first).

A member is the group's *cause* when the group's key is its own (`grouping.group_key`
without any open cause); a thermal member of a loop's group is a *symptom*; the rest are
consequences. A lost GPU's thermal and throttle alerts end, superseded (`SUPERSEDED`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import TYPE_CHECKING

from fleet.alerts import signals
from fleet.health.lost import SUPERSEDED_BY_LOST

if TYPE_CHECKING:
    from fleet.alerts.models import AlertInstance

__all__ = (
    "ATTRIBUTION_WINDOW",
    "OFF_THE_BUS_SIGNALS",
    "POWER_CAUSE_SIGNALS",
    "SUPERSEDED_BY_LOST",
    "is_consequence",
    "is_node_down",
    "is_off_the_bus",
    "superseded_when_lost",
)

# How recently a GPU must have been at or near its slowdown limit for its fall off the bus
# to be put down to its loop: a GPU trips minutes after its water stops moving, not hours.
ATTRIBUTION_WINDOW = dt.timedelta(minutes=10)

# A GPU gone from its node's bus: missing while the node reports, the agent's `gpu_lost`,
# a fatal XID (79 among them).
OFF_THE_BUS_SIGNALS = frozenset({"gpu_missing", "gpu_lost_events", "xid_events"})
# The signals whose XID events name the XID (79: "fell off the bus").
XID_SIGNALS = frozenset({"xid_events", "gpu_lost_events"})
NODE_DOWN_SIGNALS = frozenset({"agent_silent_intervals"})
# A rack's power or its feeds: the rules on these open an incident their rack's nodes and
# GPUs going down join.
POWER_CAUSE_SIGNALS = frozenset({"rack_power_fraction", "feed_load_fraction"})
# A lost GPU sends nothing: these alerts of it would fire on no data. They end instead.
_THROTTLE_SIGNALS = frozenset(
    {"hw_power_brake", "sw_power_cap", "power_cap_fraction", "power_capped_clock_fraction"}
)


def is_off_the_bus(scope: str, signal: str) -> bool:
    return scope == "gpu" and signal in OFF_THE_BUS_SIGNALS


def is_node_down(scope: str, signal: str) -> bool:
    return scope == "node" and signal in NODE_DOWN_SIGNALS


def is_consequence(scope: str, signal: str) -> bool:
    """An alert that joins an open cause as its consequence (the rack and the evidence
    decide whether it does: `grouping.assign_groups`)."""
    return is_off_the_bus(scope, signal) or is_node_down(scope, signal)


def superseded_when_lost(scope: str, signal: str) -> bool:
    """A GPU's thermal or throttle alert: ends when the GPU is lost."""
    return scope == "gpu" and (
        signals.is_cooling_symptom(scope, signal) or signal in _THROTTLE_SIGNALS
    )


def hot_gpus(loop_ids: Iterable[int], at: dt.datetime) -> set[str]:
    """GPUs (entity keys) cooled by these loops with a thermal alert started within the
    attribution window, in any state: one query."""
    from fleet.alerts.models import AlertInstance

    loops = list(loop_ids)
    if not loops:
        return set()
    rows = AlertInstance.objects.filter(
        scope="gpu", loop_id__in=loops, started_at__gte=at - ATTRIBUTION_WINDOW
    ).values_list("entity", "rule__signal")
    return {entity for entity, signal in rows if signals.is_cooling_symptom("gpu", signal)}


def gpu_entities(members: Iterable[AlertInstance]) -> set[str]:
    return {m.entity for m in members if m.scope == "gpu"}
