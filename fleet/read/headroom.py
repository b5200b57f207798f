"""A site's headroom by rack: per rack, the room left on each capacity constraint (kW under
its budget at p99, kW under its feeds' N+1, the CDU's heat room shared with its other racks,
free units), the binding one, and how many servers of a chosen model fit — the racks with
least room first.

Every figure is `fleet.read.rack_room`'s, the owner `can_take` (fleet/read/capacity_answer.py)
judges with: a rack's row here and `can_take(rack, 1, model)` give the same constraints.
Read set-based: `site_room` reads the whole site in a fixed number of statements and one
more gives the model's measured power, so a site of 500 racks costs what one rack does.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import DEFAULT_DB_ALIAS
from django.db.models import Count

from fleet.models import Node
from fleet.read.rack_room import (
    SERVER_MODELS,
    Constraint,
    ServerPower,
    binding_of,
    constraints,
    measured_server_ws,
    server_power,
    site_room,
    units_of,
    unplaced,
)

__all__ = ("Headroom", "KnownModel", "RackHeadroom", "known_models", "site_headroom")


@dataclass(frozen=True)
class KnownModel:
    """A server model the site knows (its nodes', or `SERVER_MODELS`'), with its power."""

    name: str
    nodes: int  # the site's nodes of it
    power: ServerPower | None  # measured, else rated; None: the question must give watts
    units: int | None  # its height; None: the question must give units


def known_models(
    site_id: int,
    now: float,
    using: str = DEFAULT_DB_ALIAS,
    measured: dict[str, float] | None = None,
) -> list[KnownModel]:
    """The site's node models and the rated table's, the most common on the site first.
    `measured`: `measured_server_ws` already read (one statement for every model)."""
    if measured is None:
        measured = measured_server_ws(site_id, now, using)
    counts = dict(
        Node.objects.using(using)
        .filter(rack__hall__site_id=site_id)
        .exclude(model="")
        .order_by()
        .values("model")
        .annotate(n=Count("pk"))
        .values_list("model", "n")
    )
    names = set(counts) | set(SERVER_MODELS)
    return sorted(
        (
            KnownModel(m, counts.get(m, 0), server_power(m, measured.get(m)), units_of(m))
            for m in names
        ),
        key=lambda k: (-k.nodes, k.name),
    )


@dataclass(frozen=True)
class RackHeadroom:
    rack_id: int
    rack: str
    hall: str
    p99_kw: float | None
    constraints: list[Constraint]  # judged for one server of the model: `room` and `fits`
    unplaced_nodes: int

    @property
    def binding(self) -> Constraint | None:
        return binding_of(self.constraints)

    @property
    def fits(self) -> int | None:
        """Servers of the model the rack takes; None without a measured draw."""
        if any(c.fits is None for c in self.constraints):
            return None
        binding = self.binding
        return None if binding is None else binding.fits

    def room(self, name: str) -> Constraint | None:
        return next((c for c in self.constraints if c.name == name), None)

    @property
    def least_kw(self) -> float:
        """The smallest kW room on any judged constraint (the order's tie-break)."""
        rooms = [c.room for c in self.constraints if c.unit == "kW" and c.room is not None]
        return min(rooms, default=0.0)


@dataclass(frozen=True)
class Headroom:
    model: str
    power: ServerPower
    units: int
    racks: list[RackHeadroom]  # least room first


def _order(row: RackHeadroom) -> tuple[int, int, float, str]:
    """Fewest servers that fit first, then least kW room; racks without a measured draw
    (nothing to judge their power on) last."""
    fits = row.fits
    return (fits is None, fits or 0, row.least_kw, row.rack)


def site_headroom(
    site_id: int,
    model: str,
    power: ServerPower,
    units: int,
    now: float,
    using: str = DEFAULT_DB_ALIAS,
) -> Headroom:
    """Every rack of the site judged for one more server of `model` (`power`, `units`: the
    caller's choice from `known_models`, so the question's own checks stay in one place)."""
    room = site_room(site_id, now, using)
    kw = power.w / 1000.0
    rows = [
        RackHeadroom(
            rack_id=rack_id,
            rack=r.rack,
            hall=r.hall,
            p99_kw=r.p99_kw,
            constraints=constraints(room, rack_id, 1, kw, units),
            unplaced_nodes=unplaced(room, rack_id),
        )
        for rack_id, r in room.racks.items()
    ]
    return Headroom(model, power, units, sorted(rows, key=_order))
