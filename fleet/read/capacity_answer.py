"""Capacity answers: "can rack X take N more servers of model M?" — yes or no, the binding
constraint and the margin left under each, from the figures the capacity page measures.

The figures (over `fleet.read.capacity.WINDOW_S`, 30 days, read as that page reads them):

- the rack's **p99 draw** (and p95, shown): `fleet.read.capacity_sql.rack_draws`, the
  statement the capacity page's figures come from;
- **per-server power** — the p95 of the hourly draw of the site's nodes of the same model
  (each node's draw as the rack rule has it: its meter, else its GPUs' sum;
  `fleet.read.capacity_sql.model_p95`), else the rated figure in `SERVER_MODELS`, else the
  watts the request gives.

The constraints (power budget, feed N+1, CDU heat, space) and the room each leaves are
`fleet.read.rack_room`'s, the one owner shared with the site's headroom by rack
(fleet/read/headroom.py), so the two always agree. The answer is yes when the binding one
takes N, no when it does not, and unknown (None) when the rack has no measured draw.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import DEFAULT_DB_ALIAS

from fleet.demo import RACK_UNITS
from fleet.health.racks import n_plus_one_kw
from fleet.models import Rack
from fleet.read.rack_room import (
    SERVER_MODELS,
    CapacityQuestionError,
    Constraint,
    ServerModel,
    binding_of,
    constraints,
    measured_server_ws,
    server_power,
    site_room,
    units_of,
    unplaced,
)

__all__ = (
    "MAX_SERVERS",
    "SERVER_MODELS",
    "Answer",
    "CapacityQuestionError",
    "Constraint",
    "ServerModel",
    "can_take",
    "n_plus_one_kw",
)

# More servers than a rack has units is not a question about this rack (the 400 for an
# absurd N): even 1U servers stop at RACK_UNITS.
MAX_SERVERS = RACK_UNITS


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
        return binding_of(self.constraints)

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
    if not 1 <= servers <= MAX_SERVERS:
        raise CapacityQuestionError(
            "servers", f"a whole number of servers, 1 to {MAX_SERVERS} (a rack's units)"
        )
    rack_name, site_id = (
        Rack.objects.using(using).values_list("name", "hall__site_id").get(pk=rack_id)
    )
    height = units_of(model, units)
    if height is None:
        raise CapacityQuestionError(
            "units", f"the height of {model!r} is not known: give its units"
        )
    measured = measured_server_ws(site_id, now, using, model=model).get(model)
    power = server_power(model, measured, watts)
    if power is None:
        raise CapacityQuestionError(
            "watts", f"no measured or rated power for {model!r}: give the server's watts"
        )
    room = site_room(site_id, now, using)
    own = room.racks[rack_id]
    return Answer(
        rack_id=rack_id,
        rack=rack_name,
        servers=servers,
        model=model,
        server_w=power.w,
        server_w_from=power.source,
        server_units=height,
        p95_kw=own.p95_kw,
        p99_kw=own.p99_kw,
        constraints=constraints(room, rack_id, servers, power.w / 1000.0, height),
        unplaced_nodes=unplaced(room, rack_id),
    )
