"""The fleet as the server knows it: `GET /api/v1/inventory` with the enrolment token."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agents.inventory_client import InventoryFetchError, get_inventory


class InventoryError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Feed:
    name: str
    available_kw: float


@dataclass(frozen=True, slots=True)
class Rack:
    name: str
    hall: str
    cooling: str  # air | rear_door | direct_liquid | immersion
    budget_kw: float
    loop: str | None
    feeds: tuple[Feed, ...]

    @property
    def liquid(self) -> bool:
        return self.cooling in ("direct_liquid", "immersion")


@dataclass(frozen=True, slots=True)
class Loop:
    name: str
    capacity_kw: float
    supply_limit_c: float


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    rack: str
    gpus: tuple[tuple[int, str], ...]  # (index, model)


@dataclass(frozen=True, slots=True)
class Inventory:
    site_slug: str
    site_name: str
    racks: tuple[Rack, ...]
    loops: tuple[Loop, ...]
    nodes: tuple[Node, ...] = field(default=())

    def first_nodes(self, count: int | None) -> Inventory:
        """The first `count` nodes, with only the racks and loops they use."""
        nodes = self.nodes if count is None else self.nodes[:count]
        rack_names = {n.rack for n in nodes}
        racks = tuple(r for r in self.racks if r.name in rack_names)
        loop_names = {r.loop for r in racks if r.loop}
        loops = tuple(lp for lp in self.loops if lp.name in loop_names)
        return Inventory(self.site_slug, self.site_name, racks, loops, nodes)


def parse_inventory(data: Any) -> Inventory:
    try:
        site = data["site"]
        racks = tuple(
            Rack(
                name=str(r["name"]),
                hall=str(r.get("hall") or ""),
                cooling=str(r.get("cooling") or "air"),
                budget_kw=float(r.get("budget_kw") or 0.0),
                loop=r.get("loop"),
                feeds=tuple(
                    Feed(str(f["name"]), float(f.get("available_kw") or 0.0))
                    for f in r.get("feeds") or ()
                ),
            )
            for r in data.get("racks") or ()
        )
        loops = tuple(
            Loop(str(lp["name"]), float(lp["capacity_kw"]), float(lp["supply_limit_c"]))
            for lp in data.get("loops") or ()
        )
        nodes = tuple(
            Node(
                name=str(n["name"]),
                rack=str(n["rack"]),
                gpus=tuple((int(g["index"]), str(g.get("model") or "")) for g in n["gpus"]),
            )
            for n in data.get("nodes") or ()
        )
        return Inventory(
            str(site["slug"]), str(site.get("name") or site["slug"]), racks, loops, nodes
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InventoryError(f"inventory is not in the expected shape: {exc!r}") from None


def fetch_inventory(server: str, enroll_token: str, timeout_s: float = 10.0) -> Inventory:
    try:
        data = get_inventory(server, enroll_token, timeout_s)
    except InventoryFetchError as exc:
        if exc.status == 401:
            raise InventoryError(
                "the enrolment token was refused (bad, expired or revoked)"
            ) from None
        raise InventoryError(str(exc)) from None
    return parse_inventory(data)
