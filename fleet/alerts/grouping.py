"""Where an alert is, and which notification it belongs to (docs/rules.md, "Grouping").

`Places` reads the inventory once per evaluation (sites, racks, nodes, loops, feeds: a
query each) and answers, for any instance, its site, rack, node and cooling loop and the
names silences match on. `assign_groups` puts each instance that fires into its group:

- a cooling loop's alerts: `loop:<id>`;
- a thermal alert (fleet.alerts.signals.is_cooling_symptom) of a GPU, node or rack whose
  loop has an open group: that loop's group — the loop is the cause, they are symptoms;
- other thermal alerts of one rack: `rack:<id>:thermal`, so a rack's GPUs running hot on
  several rules are one message;
- any other rule in a rack: `rack:<id>:<rule key>` (72 GPUs with an ECC error: one);
- a site's alerts: `site:<id>`;
- an idle allocation's alerts (`allocated_idle`): `workload:<workload id>:<rule key>`, one
  message per workload listing its GPUs, wherever they are;
- a consequence (a GPU off the bus, a node gone silent) of an open cooling-loop or rack-
  power incident: that incident (fleet/alerts/consequences.py);
- a rack's, feed's or GPU's time-to-limit forecast while an incident of its rack is open:
  that incident (a loop's forecast joins its loop's incident by its own key; a GPU's, a
  thermal signal, its loop's open incident when its rack has none);
- a GPU's health-state alert (`health_*`: the record says reset needed or replace) while an
  incident of its loop or rack is open: that incident, the loop's first — a GPU that fell
  off the bus when its water stopped is part of that story, not a story of its own.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

from django.db.models import Count

from fleet.alerts import consequences, signals
from fleet.alerts.holders import WORKLOAD_ID_LABEL
from fleet.alerts.models import AlertGroup, AlertInstance, AlertRule
from fleet.models import GPU, CoolingLoop, Node, PowerFeed, Rack, Site
from fleet.notifications.notice import Where

__all__ = (
    "INCIDENT_LABEL",
    "SCOPE_ORDER",
    "WORKLOAD_SIGNALS",
    "Place",
    "Places",
    "assign_groups",
    "group_key",
    "is_cause",
    "rack_span",
)

# Causes before symptoms: a loop's alert opens its group before a GPU's looks for it.
SCOPE_ORDER = {"site": 0, "loop": 1, "feed": 2, "rack": 3, "node": 4, "gpu": 5}
# Signals about a workload rather than a place: grouped by the workload that holds the GPU.
WORKLOAD_SIGNALS = frozenset({"allocated_idle"})
# Every member's labels name its group: a silence `incident=<key>` mutes a whole incident.
INCIDENT_LABEL = "incident"
_PLACE_LABELS = ("site", "hall", "loop", "rack", "feed", "node", "gpu")


@dataclass(frozen=True)
class Place:
    site_id: int | None = None
    rack_id: int | None = None
    node_id: int | None = None
    loop_id: int | None = None
    names: dict[str, str] = field(default_factory=dict)

    def where(self) -> Where:
        """As a message names it: a rack's loop is in the labels, not in its address."""
        names = {k: self.names.get(k) for k in _PLACE_LABELS}
        if self.rack_id is not None:
            names["loop"] = None
        return Where(**names)


NOWHERE = Place()


class Places:
    """The inventory's names and links, read lazily, once per evaluation."""

    @cached_property
    def sites(self) -> dict[int, str]:
        return dict(Site.objects.values_list("id", "name"))

    @cached_property
    def racks(self) -> dict[int, tuple[str, str, int, int | None]]:
        rows = Rack.objects.values_list("id", "name", "hall__name", "hall__site_id", "loop_id")
        return {r[0]: (r[1], r[2], r[3], r[4]) for r in rows}

    @cached_property
    def nodes(self) -> dict[int, tuple[str, int]]:
        rows = Node.objects.values_list("id", "name", "rack_id")
        return {n: (name, rack) for n, name, rack in rows}

    @cached_property
    def loops(self) -> dict[int, tuple[str, int]]:
        rows = CoolingLoop.objects.values_list("id", "name", "site_id")
        return {lid: (name, site) for lid, name, site in rows}

    @cached_property
    def feeds(self) -> dict[int, tuple[str, int]]:
        rows = PowerFeed.objects.values_list("id", "name", "rack_id")
        return {f: (name, rack) for f, name, rack in rows}

    @cached_property
    def _gpus_per_rack(self) -> dict[int, int]:
        rows = GPU.objects.values("node__rack_id").annotate(n=Count("id"))
        return {r["node__rack_id"]: r["n"] for r in rows}

    def gpus_in_rack(self, rack_id: int) -> int:
        return self._gpus_per_rack.get(rack_id, 0)

    def racks_of_loop(self, loop_id: int) -> list[str]:
        return sorted(name for name, _, _, loop in self.racks.values() if loop == loop_id)

    def gpus_of_loop(self, loop_id: int) -> int:
        return sum(self.gpus_in_rack(r) for r, v in self.racks.items() if v[3] == loop_id)

    def of(self, scope: str, entity: str) -> Place:
        """The place of an entity key ('12:3' is GPU 3 of node 12); NOWHERE if unknown."""
        try:
            key = [int(part) for part in entity.split(":")]
        except ValueError:
            return NOWHERE
        if scope == "site":
            return self._site_place(key[0])
        if scope == "loop":
            return self._loop_place(key[0])
        names: dict[str, str] = {}
        node_id = None
        if scope in ("node", "gpu"):
            node = self.nodes.get(key[0])
            if node is None:
                return NOWHERE
            node_id, rack_id = key[0], node[1]
            names["node"] = node[0]
            if scope == "gpu" and len(key) > 1:
                names["gpu"] = str(key[1])
        elif scope == "feed":
            feed = self.feeds.get(key[0])
            if feed is None:
                return NOWHERE
            names["feed"], rack_id = feed
        else:
            rack_id = key[0]
        return self._rack_place(rack_id, node_id, names)

    def _site_place(self, site_id: int) -> Place:
        if site_id not in self.sites:
            return NOWHERE
        return Place(site_id=site_id, names={"site": self.sites[site_id]})

    def _loop_place(self, loop_id: int) -> Place:
        loop = self.loops.get(loop_id)
        if loop is None:
            return NOWHERE
        name, site_id = loop
        names = {"site": self.sites.get(site_id, ""), "loop": name}
        return Place(site_id=site_id, loop_id=loop_id, names=names)

    def _rack_place(self, rack_id: int, node_id: int | None, names: dict[str, str]) -> Place:
        rack = self.racks.get(rack_id)
        if rack is None:
            return NOWHERE
        name, hall, site_id, loop_id = rack
        names.update(site=self.sites.get(site_id, ""), hall=hall, rack=name)
        if loop_id is not None and loop_id in self.loops:
            names["loop"] = self.loops[loop_id][0]
        return Place(site_id, rack_id, node_id, loop_id, names)

    def locate(self, instances: Iterable[AlertInstance]) -> None:
        """Fix each new instance's place: its ids, and its place names among its labels."""
        for inst in instances:
            place = self.of(inst.scope, inst.entity)
            inst.site_id, inst.rack_id = place.site_id, place.rack_id
            inst.node_id, inst.loop_id = place.node_id, place.loop_id
            inst.labels = {**place.names, **inst.labels}


def group_key(inst: AlertInstance, open_loops: set[int]) -> str:
    """The group an instance that fires joins (see the module's docstring)."""
    scope = inst.scope
    if scope == "loop":
        return f"loop:{inst.loop_id or inst.entity}"
    if scope == "site":
        return f"site:{inst.site_id or inst.entity}"
    workload = (inst.labels or {}).get(WORKLOAD_ID_LABEL)
    if workload and inst.rule.signal in WORKLOAD_SIGNALS:
        return f"workload:{workload}:{inst.rule.key}"
    symptom = signals.is_cooling_symptom(scope, inst.rule.signal)
    if symptom and inst.loop_id is not None and inst.loop_id in open_loops:
        return f"loop:{inst.loop_id}"
    if inst.rack_id is None:
        return f"{scope}:{inst.entity}:{inst.rule.key}"
    return f"rack:{inst.rack_id}:{'thermal' if symptom else inst.rule.key}"


def assign_groups(firing: Iterable[AlertInstance], at: dt.datetime) -> None:
    """Put each instance that fires in this evaluation into its open group (created when
    none is open), causes first so their symptoms and consequences can join them
    (fleet/alerts/consequences.py). Each one's labels get `incident=<group key>`."""
    ordered = sorted(firing, key=lambda i: SCOPE_ORDER.get(i.scope, 9))
    if not ordered:
        return
    groups = {g.key: g for g in AlertGroup.objects.filter(closed_at__isnull=True)}
    causes = _Causes(groups, at)
    for inst in ordered:
        open_loops = {int(k[5:]) for k in groups if k.startswith("loop:") and k[5:].isdigit()}
        key = (
            causes.consequence_of(inst, open_loops)
            or forecast_joins(inst, groups)
            or health_joins(inst, groups, open_loops)
            or group_key(inst, open_loops)
        )
        group = groups.get(key)
        if group is None:
            group = AlertGroup.objects.create(key=key, site_id=inst.site_id, opened_at=at)
            groups[key] = group
        inst.group = group
        inst.labels = {**inst.labels, INCIDENT_LABEL: key}


def forecast_joins(inst: AlertInstance, groups: dict[str, AlertGroup]) -> str | None:
    """A rack's, feed's or GPU's time-to-limit alert, while an incident of that rack is
    open: that incident, the oldest if several (what is already wrong there is why it
    climbs). A loop's joins its loop's incident by its own key (`loop:<id>`)."""
    if inst.scope not in ("rack", "feed", "gpu") or inst.rack_id is None:
        return None
    if inst.rule.signal not in signals.FORECAST_SIGNALS:
        return None
    return _oldest_open_on_rack(inst, inst.rack_id, groups)


def health_joins(
    inst: AlertInstance, groups: dict[str, AlertGroup], open_loops: set[int]
) -> str | None:
    """A GPU's health-state alert, while an incident of its loop or its rack is open: the
    loop's, else the rack's oldest."""
    if inst.scope != "gpu" or inst.rule.signal not in signals.HEALTH_SIGNALS:
        return None
    if inst.loop_id is not None and inst.loop_id in open_loops:
        return f"loop:{inst.loop_id}"
    if inst.rack_id is None:
        return None
    return _oldest_open_on_rack(inst, inst.rack_id, groups)


def _oldest_open_on_rack(
    inst: AlertInstance, rack_id: int, groups: dict[str, AlertGroup]
) -> str | None:
    """The oldest open incident of the rack other than the one the instance would open."""
    prefix = f"rack:{rack_id}:"
    own = group_key(inst, set())
    open_here = sorted(
        (g.opened_at, key) for key, g in groups.items() if key.startswith(prefix) and key != own
    )
    return open_here[0][1] if open_here else None


class _Causes:
    """Which open cause, if any, an instance is a consequence of. Reads the rules of the
    power causes and the recently hot GPUs once, and only when a consequence fires."""

    def __init__(self, groups: dict[str, AlertGroup], at: dt.datetime) -> None:
        self.groups, self.at = groups, at
        self._power_rules: set[str] | None = None
        self._hot: tuple[frozenset[int], set[str]] | None = None

    def consequence_of(self, inst: AlertInstance, open_loops: set[int]) -> str | None:
        if not consequences.is_consequence(inst.scope, inst.rule.signal):
            return None
        loop = inst.loop_id
        if loop is not None and loop in open_loops and self._attributed(inst, open_loops):
            return f"loop:{loop}"
        if inst.rack_id is not None:
            return self.power_cause(inst.rack_id)
        return None

    def _attributed(self, inst: AlertInstance, open_loops: set[int]) -> bool:
        """A node of the loop's racks going silent; a GPU of them only when it was hot."""
        return inst.scope == "node" or inst.entity in self.hot(open_loops)

    def hot(self, open_loops: set[int]) -> set[str]:
        """Read again only if a loop's incident opened since (in this evaluation)."""
        loops = frozenset(open_loops)
        if self._hot is None or self._hot[0] != loops:
            self._hot = (loops, consequences.hot_gpus(loops, self.at))
        return self._hot[1]

    def power_cause(self, rack_id: int) -> str | None:
        if self._power_rules is None:
            self._power_rules = set(
                AlertRule.objects.filter(signal__in=consequences.POWER_CAUSE_SIGNALS).values_list(
                    "key", flat=True
                )
            )
        prefix = f"rack:{rack_id}:"
        open_causes = sorted(
            (g.opened_at, key)
            for key, g in self.groups.items()
            if key.startswith(prefix) and key[len(prefix) :] in self._power_rules
        )
        return open_causes[0][1] if open_causes else None


def is_cause(group_key_: str, inst: AlertInstance) -> bool:
    """The member is what its group is about (its own key is the group's), not a symptom
    or a consequence that joined it."""
    return group_key(inst, set()) == group_key_


def rack_span(names: Iterable[str]) -> str:
    """Racks as an operator writes them: 'A01', 'A01–A02', 'A01, B07 and 3 more'."""
    ordered = sorted(set(names))
    if not ordered:
        return ""
    if len(ordered) == 1:
        return ordered[0]
    if _consecutive(ordered):
        return f"{ordered[0]}–{ordered[-1]}"
    if len(ordered) <= 4:
        return ", ".join(ordered[:-1]) + f" and {ordered[-1]}"
    return ", ".join(ordered[:3]) + f" and {len(ordered) - 3} more"


def _consecutive(names: list[str]) -> bool:
    """Same prefix, numbers one apart: A01, A02, A03."""
    parts = [_split_number(n) for n in names]
    if any(p is None for p in parts):
        return False
    prefixes = {p[0] for p in parts if p is not None}
    numbers = [p[1] for p in parts if p is not None]
    return len(prefixes) == 1 and numbers == list(range(numbers[0], numbers[0] + len(numbers)))


def _split_number(name: str) -> tuple[str, int] | None:
    digits = len(name) - len(name.rstrip("0123456789"))
    if digits == 0:
        return None
    return name[:-digits], int(name[-digits:])
