"""The room a rack has left on each capacity constraint: the one owner of the figures both
the capacity answer (fleet/read/capacity_answer.py, one rack) and the site's headroom by
rack (fleet/read/headroom.py, every rack) judge with.

A site's facts are read set-based, in a fixed number of statements whatever its size
(`site_room`): the racks' 30-day p95/p99 draw (`fleet.read.capacity_sql.rack_draws`, the
statement and tier the capacity page's figures come from), every feed, every rack's cooling
loop, every placed node's units. `constraints` then judges one
rack from them in memory:

- **power budget** — the rack's `power_budget_kw` against its p99 draw;
- **feed N+1** — what its feeds carry less any one (`n_plus_one_kw`), against the same; a
  rack without feeds in the inventory is not judged on them;
- **CDU heat** — the loop's `capacity_kw` against this rack's p99 plus its other racks'
  p99s, all power counted as heat into the loop (an upper bound: a direct-liquid rack
  sheds some to the room air, and the racks' busiest hours need not coincide). Air-cooled
  racks are not judged on it;
- **space** — whole runs of free rack units (`RACK_UNITS`, from 1 at the bottom) holding
  the model's height; a node's units run from its `position` up for its model's height.
  Nodes at position 0 (not placed) take no units here, and are counted.

Each constraint says how many servers of the model it still takes (`fits`); the binding
one takes the fewest (on a tie, the first in the order above).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from django.db import DEFAULT_DB_ALIAS

from fleet.demo import RACK_UNITS
from fleet.health.racks import n_plus_one_kw
from fleet.models import Node, PowerFeed, Rack
from fleet.read.capacity import WINDOW_S, tier_for
from fleet.read.capacity_sql import model_p95, rack_draws

__all__ = (
    "CDU",
    "FEEDS",
    "POWER",
    "SERVER_MODELS",
    "SPACE",
    "CapacityQuestionError",
    "Constraint",
    "LoopFacts",
    "RackDrawn",
    "ServerModel",
    "ServerPower",
    "SiteRoom",
    "binding_of",
    "constraints",
    "measured_server_ws",
    "server_power",
    "site_room",
    "units_of",
    "unplaced",
)


@dataclass(frozen=True)
class ServerModel:
    units: int  # height in rack units
    rated_w: float | None  # its rated (nameplate) power; None: not known here


# Rated figures, used where the site has no measured node of the model. An HGX 8-GPU
# server is 8U and draws up to ~10.2 kW (NVIDIA DGX H100 user guide, docs/reference/
# facility.md); a GB200 NVL72 compute tray is 1U (fleet/demo.py), its own draw not rated here.
SERVER_MODELS: dict[str, ServerModel] = {
    "HGX H200 8-GPU": ServerModel(8, 10_200.0),
    "HGX H100 8-GPU": ServerModel(8, 10_200.0),
    "GB200 NVL72 compute tray": ServerModel(1, None),
}

POWER, FEEDS, CDU, SPACE = "power budget", "feed N+1", "CDU heat", "space"


class CapacityQuestionError(ValueError):
    """A question that cannot be answered as asked (the API's and the page's 400)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


@dataclass(frozen=True)
class Constraint:
    name: str  # POWER, FEEDS, CDU or SPACE
    unit: str  # "kW" or "U"
    limit: float  # the budget, the feeds' N+1 kW, the loop's capacity, the rack's units
    used: float | None  # drawn (p99; for the CDU with its other racks) or units taken
    added: float  # what N servers add
    fits: int | None  # servers it still takes; None without a measured draw
    detail: str  # the figures in words

    @property
    def room(self) -> float | None:
        """What is left before the N servers: kW under the limit, or free units."""
        return None if self.used is None else self.limit - self.used

    @property
    def margin(self) -> float | None:
        """What is left after the N servers (negative: short by that much)."""
        room = self.room
        return None if room is None else room - self.added


def binding_of(judged: list[Constraint]) -> Constraint | None:
    """The constraint that takes the fewest servers (the first of a tie); None when none
    could be judged (no measured draw and no space figure)."""
    known = [c for c in judged if c.fits is not None]
    return min(known, key=lambda c: c.fits or 0) if known else None


@dataclass(frozen=True)
class RackDrawn:
    """A rack's budget and its draw over the window, as the capacity page has them."""

    rack_id: int
    rack: str
    hall: str
    budget_kw: float
    p95_kw: float | None  # None: no measured draw in the window
    p99_kw: float | None


@dataclass(frozen=True)
class LoopFacts:
    id: int
    name: str
    capacity_kw: float


@dataclass(frozen=True)
class SiteRoom:
    """What the constraints are judged on, for every rack of one site."""

    racks: dict[int, RackDrawn]  # by rack id, in the inventory's order
    feeds_kw: dict[int, list[float]] = field(default_factory=dict)  # each feed's available kW
    loops: dict[int, LoopFacts] = field(default_factory=dict)  # rack id → its cooling loop
    on_loop: dict[int, list[int]] = field(default_factory=dict)  # loop id → its racks
    nodes: dict[int, list[tuple[int, str]]] = field(default_factory=dict)  # (position, model)


def site_room(site_id: int, now: float, using: str = DEFAULT_DB_ALIAS) -> SiteRoom:
    """Every rack's facts for the constraints, in five statements whatever the site's size."""
    tier = tier_for(WINDOW_S)
    draws = {d.rack_id: d for d in rack_draws(site_id, now - WINDOW_S, now, tier, using)}
    racks: dict[int, RackDrawn] = {}
    inventory = Rack.objects.using(using).filter(hall__site_id=site_id)
    for rack_id, name, hall, budget in inventory.values_list(
        "pk", "name", "hall__name", "power_budget_kw"
    ):
        draw = draws.get(rack_id)
        racks[rack_id] = RackDrawn(
            rack_id,
            name,
            hall,
            float(budget),
            None if draw is None else draw.p95_w / 1000.0,
            None if draw is None else draw.p99_w / 1000.0,
        )
    feeds: dict[int, list[float]] = defaultdict(list)
    for feed in PowerFeed.objects.using(using).filter(rack__hall__site_id=site_id):
        feeds[feed.rack_id].append(feed.available_kw)
    loops: dict[int, LoopFacts] = {}
    on_loop: dict[int, list[int]] = defaultdict(list)
    cooled = Rack.objects.using(using).filter(hall__site_id=site_id, loop__isnull=False)
    for rack_id, loop_id, name, capacity in cooled.values_list(
        "pk", "loop_id", "loop__name", "loop__capacity_kw"
    ):
        loops[rack_id] = LoopFacts(loop_id, name, float(capacity))
        on_loop[loop_id].append(rack_id)
    nodes: dict[int, list[tuple[int, str]]] = defaultdict(list)
    placed = Node.objects.using(using).filter(rack__hall__site_id=site_id)
    for rack_id, position, model in placed.values_list("rack_id", "position", "model"):
        nodes[rack_id].append((position, model))
    return SiteRoom(racks, dict(feeds), loops, dict(on_loop), dict(nodes))


def measured_server_ws(
    site_id: int, now: float, using: str = DEFAULT_DB_ALIAS, model: str | None = None
) -> dict[str, float]:
    """p95 (W) of the hourly draw of the site's nodes of each model (or only `model`) over
    the window, each node's draw its meter, else its GPUs' sum (the rack rule's `per_node`)."""
    return model_p95(site_id, now - WINDOW_S, now, tier_for(WINDOW_S), using, model)


@dataclass(frozen=True)
class ServerPower:
    w: float
    source: str  # "measured" (p95 of the site's nodes of the model), "rated", "request"


def server_power(
    model: str, measured_w: float | None, watts: float | None = None
) -> ServerPower | None:
    """Per-server power: measured, else rated, else the watts given; None when none is."""
    if measured_w is not None:
        return ServerPower(measured_w, "measured")
    rated = SERVER_MODELS.get(model)
    if rated is not None and rated.rated_w is not None:
        return ServerPower(rated.rated_w, "rated")
    if watts is not None:
        return ServerPower(watts, "request")
    return None


def units_of(model: str, units: int | None = None) -> int | None:
    """A model's height: the table's, else the units given; None when neither is known."""
    known = SERVER_MODELS.get(model)
    return known.units if known is not None else units


def _kw_fits(room_kw: float | None, server_kw: float) -> int | None:
    if room_kw is None:
        return None
    return max(0, math.floor(room_kw / server_kw + 1e-9))


def _space(nodes: list[tuple[int, str]], height: int, servers: int) -> Constraint:
    taken: set[int] = set()
    for position, model in nodes:
        if position == 0:
            continue
        node_units = SERVER_MODELS[model].units if model in SERVER_MODELS else 1
        taken.update(range(position, position + node_units))
    fits, run = 0, 0
    for u in range(1, RACK_UNITS + 1):
        run = 0 if u in taken else run + 1
        if run == height:  # a whole slot: start the next one above it
            fits, run = fits + 1, 0
    used = len(taken & set(range(1, RACK_UNITS + 1)))
    detail = f"{RACK_UNITS - used} of {RACK_UNITS} U free: {fits} slot(s) of {height} U"
    return Constraint(SPACE, "U", RACK_UNITS, used, servers * height, fits, detail)


def unplaced(room: SiteRoom, rack_id: int) -> int:
    """The rack's nodes at position 0: their units are not known."""
    return sum(1 for position, _ in room.nodes.get(rack_id, []) if position == 0)


def constraints(
    room: SiteRoom, rack_id: int, servers: int, server_kw: float, height: int
) -> list[Constraint]:
    """Every constraint of the rack judged for `servers` more of `server_kw` and `height`
    (p99 + N × per-server power: a server added may run at its typical peak in the rack's
    busiest hours; p99 is what "stranded kW" is measured against)."""
    own = room.racks[rack_id]
    p99 = own.p99_kw
    added = servers * server_kw

    def power(name: str, limit: float, used: float | None, detail: str) -> Constraint:
        left = None if used is None else limit - used
        return Constraint(name, "kW", limit, used, added, _kw_fits(left, server_kw), detail)

    judged = [power(POWER, own.budget_kw, p99, f"budget {own.budget_kw:.1f} kW")]
    feeds = room.feeds_kw.get(rack_id, [])
    if feeds:
        left = n_plus_one_kw(feeds)
        judged.append(power(FEEDS, left, p99, f"{len(feeds)} feeds less any one: {left:.1f} kW"))
    loop = room.loops.get(rack_id)
    if loop is not None:
        others = [room.racks[r] for r in room.on_loop[loop.id] if r != rack_id]
        other_kw = sum(r.p99_kw or 0.0 for r in others)
        used = None if p99 is None else p99 + other_kw
        detail = (
            f"{loop.name} {loop.capacity_kw:.1f} kW; its {len(others)} other rack(s)"
            f" draw {other_kw:.1f} kW at p99"
        )
        judged.append(power(CDU, loop.capacity_kw, used, detail))
    judged.append(_space(room.nodes.get(rack_id, []), height, servers))
    return judged
