"""Capacity answers: "can rack X take N more servers of model M?" — yes or no, the binding
constraint and the margin left under each, from the figures the capacity page measures.

The figures (over `fleet.read.capacity.WINDOW_S`, 30 days, read as that page reads them):

- the rack's **p99 draw** (and p95, shown): `fleet.read.capacity.site_capacity`;
- **per-server power** — the p95 of the hourly draw of the site's nodes of the same model
  (each node's draw as the rack rule has it: its meter, else its GPUs' sum;
  `fleet.read.capacity_sql.rack_series_sql`'s `per_node`), else the rated figure in
  `SERVER_MODELS`, else the watts the request gives.

The constraints, each judged on p99 + N × per-server power (a server added may run at its
typical peak in the rack's busiest hours; p99 is what "stranded kW" is measured against):

- **power budget** — the rack's `power_budget_kw`;
- **feed N+1** — what the rack's feeds less any one carry (`n_plus_one_kw`: the largest
  feed lost, the rule of `fleet.demo.feed_warnings` and the rack page's N+1 lines); a rack
  without feeds in the inventory is not judged on them;
- **CDU heat** — the loop's `capacity_kw` less the p99 draw of its other racks; all of a
  rack's power is counted as heat into the loop (an upper bound: a direct-liquid rack
  sheds some to the room air), and each rack's own p99 is summed (an upper bound too: the
  racks' busiest hours need not coincide). Air-cooled racks are not judged on it;
- **space** — whole runs of free rack units (`RACK_UNITS`, from 1 at the bottom) holding
  the model's height; a node's units run from its `position` up for its model's height.
  Nodes at position 0 (not placed) take no units here, and the answer says how many.

Each constraint says how many servers it still takes (`fits`); the binding one takes the
fewest (on a tie, the first in the order above). The answer is yes when the binding one
takes N, no when it does not, and unknown (None) when the rack has no measured draw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from django.db import DEFAULT_DB_ALIAS, connections

from fleet.demo import RACK_UNITS
from fleet.health.racks import n_plus_one_kw
from fleet.models import Node, PowerFeed, Rack
from fleet.read.capacity import WINDOW_S, RackCapacity, site_capacity, tier_for
from fleet.read.capacity_sql import rack_series_params, rack_series_sql

__all__ = (
    "SERVER_MODELS",
    "Answer",
    "CapacityQuestionError",
    "Constraint",
    "ServerModel",
    "can_take",
    "n_plus_one_kw",
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
    """A question that cannot be answered as asked (the API's 400)."""

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
    def margin(self) -> float | None:
        """What is left after the N servers (negative: short by that much)."""
        return None if self.used is None else self.limit - self.used - self.added


@dataclass(frozen=True)
class Answer:
    rack_id: int
    rack: str
    servers: int
    model: str
    server_w: float
    server_w_from: str  # "measured" (p95 of the site's nodes of the model), "rated", "request"
    server_units: int
    p95_kw: float | None
    p99_kw: float | None
    constraints: list[Constraint]
    unplaced_nodes: int  # nodes at position 0: their units are not known

    @property
    def binding(self) -> Constraint | None:
        judged = [c for c in self.constraints if c.fits is not None]
        return min(judged, key=lambda c: c.fits or 0) if judged else None

    @property
    def yes(self) -> bool | None:
        if any(c.fits is None for c in self.constraints):
            return None
        binding = self.binding
        return binding is None or (binding.fits or 0) >= self.servers

    def as_json(self) -> dict[str, object]:
        binding = self.binding
        return {
            "rack": {"id": self.rack_id, "name": self.rack},
            "servers": self.servers,
            "model": self.model,
            "answer": {True: "yes", False: "no", None: "unknown"}[self.yes],
            "binding": None if binding is None else binding.name,
            "server_w": round(self.server_w, 1),
            "server_w_from": self.server_w_from,
            "server_units": self.server_units,
            "p95_kw": _r(self.p95_kw),
            "p99_kw": _r(self.p99_kw),
            "unplaced_nodes": self.unplaced_nodes,
            "constraints": [
                {
                    "name": c.name,
                    "unit": c.unit,
                    "limit": _r(c.limit),
                    "used": _r(c.used),
                    "added": _r(c.added),
                    "margin": _r(c.margin),
                    "fits": c.fits,
                    "detail": c.detail,
                }
                for c in self.constraints
            ],
        }


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _percentile_cont(values: list[float], p: float) -> float:
    """PostgreSQL's percentile_cont: linear interpolation between the two nearest ranks."""
    ordered = sorted(values)
    pos = p * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def measured_server_w(site_id: int, model: str, now: float, using: str) -> float | None:
    """p95 (W) of the hourly draw of the site's nodes of `model` over the window, each
    node's draw its meter, else its GPUs' sum (the rack rule's `per_node`)."""
    sql = (
        "WITH "
        + rack_series_sql(tier_for(WINDOW_S))
        + "SELECT COALESCE(p.meter, p.gpus) FROM per_node p"
        " JOIN fleet_node n ON n.id = p.node_id WHERE n.model = %s"
    )
    with connections[using].cursor() as cur:
        cur.execute(sql, [*rack_series_params(site_id, now - WINDOW_S, now), model])
        draws = [float(w) for (w,) in cur.fetchall() if w is not None]
    return _percentile_cont(draws, 0.95) if draws else None


def _server_power(
    site_id: int, model: str, now: float, watts: float | None, using: str
) -> tuple[float, str]:
    measured = measured_server_w(site_id, model, now, using)
    if measured is not None:
        return measured, "measured"
    rated = SERVER_MODELS.get(model)
    if rated is not None and rated.rated_w is not None:
        return rated.rated_w, "rated"
    if watts is not None:
        return watts, "request"
    raise CapacityQuestionError(
        "watts", f"no measured or rated power for {model!r}: give the server's watts"
    )


def _units(model: str, units: int | None) -> int:
    known = SERVER_MODELS.get(model)
    if known is not None:
        return known.units
    if units is not None:
        return units
    raise CapacityQuestionError("units", f"the height of {model!r} is not known: give its units")


def _kw_fits(room_kw: float | None, server_kw: float) -> int | None:
    if room_kw is None:
        return None
    return max(0, math.floor(room_kw / server_kw + 1e-9))


def _space(rack: Rack, units: int, servers: int, using: str) -> tuple[Constraint, int]:
    taken: set[int] = set()
    unplaced = 0
    for position, model in (
        Node.objects.using(using).filter(rack=rack).values_list("position", "model")
    ):
        if position == 0:
            unplaced += 1
            continue
        height = SERVER_MODELS[model].units if model in SERVER_MODELS else 1
        taken.update(range(position, position + height))
    fits, run = 0, 0
    for u in range(1, RACK_UNITS + 1):
        run = 0 if u in taken else run + 1
        if run == units:  # a whole slot: start the next one above it
            fits, run = fits + 1, 0
    used = len(taken & set(range(1, RACK_UNITS + 1)))
    detail = f"{RACK_UNITS - used} of {RACK_UNITS} U free: {fits} slot(s) of {units} U"
    return Constraint(SPACE, "U", RACK_UNITS, used, servers * units, fits, detail), unplaced


def can_take(
    rack_id: int,
    servers: int,
    model: str,
    now: float,
    watts: float | None = None,
    units: int | None = None,
    using: str = DEFAULT_DB_ALIAS,
) -> Answer:
    """Can the rack take `servers` more servers of `model`? Raises Rack.DoesNotExist for no
    such rack and CapacityQuestionError for a question that cannot be answered."""
    if servers < 1:
        raise CapacityQuestionError("servers", "a whole number of servers, 1 or more")
    rack = Rack.objects.using(using).select_related("hall", "loop").get(pk=rack_id)
    site_id = rack.hall.site_id
    height = _units(model, units)
    server_w, server_from = _server_power(site_id, model, now, watts, using)
    server_kw = server_w / 1000.0
    added = servers * server_kw
    racks: dict[int, RackCapacity] = {
        r.rack_id: r for r in site_capacity(site_id, now, using=using)
    }
    own = racks[rack.pk]
    p99 = own.p99_kw

    def power(name: str, limit: float, used: float | None, detail: str) -> Constraint:
        room = None if used is None else limit - used
        return Constraint(name, "kW", limit, used, added, _kw_fits(room, server_kw), detail)

    constraints = [power(POWER, own.budget_kw, p99, f"budget {own.budget_kw:.1f} kW")]
    feeds = [f.available_kw for f in PowerFeed.objects.using(using).filter(rack=rack)]
    if feeds:
        left = n_plus_one_kw(feeds)
        constraints.append(
            power(FEEDS, left, p99, f"{len(feeds)} feeds less any one: {left:.1f} kW")
        )
    if rack.loop is not None:
        on_loop = _on_loop(rack, using)
        others = [r for r in racks.values() if r.rack_id != rack.pk and r.rack_id in on_loop]
        other_kw = sum(r.p99_kw or 0.0 for r in others)
        used = None if p99 is None else p99 + other_kw
        detail = (
            f"{rack.loop.name} {rack.loop.capacity_kw:.1f} kW; its {len(others)} other rack(s)"
            f" draw {other_kw:.1f} kW at p99"
        )
        constraints.append(power(CDU, rack.loop.capacity_kw, used, detail))
    space, unplaced = _space(rack, height, servers, using)
    constraints.append(space)
    return Answer(
        rack_id=rack.pk,
        rack=rack.name,
        servers=servers,
        model=model,
        server_w=server_w,
        server_w_from=server_from,
        server_units=height,
        p95_kw=own.p95_kw,
        p99_kw=p99,
        constraints=constraints,
        unplaced_nodes=unplaced,
    )


def _on_loop(rack: Rack, using: str) -> set[int]:
    return set(Rack.objects.using(using).filter(loop_id=rack.loop_id).values_list("pk", flat=True))
