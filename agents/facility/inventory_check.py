"""Are the entities a facility agent's targets feed in its site's inventory?

The server refuses (400) a whole site batch when one sample names a rack, feed or loop
its site does not have, so one mistyped `feeds` would lose every target's data on every
tick. `fleet-agent run` and `check` therefore read the inventory with the agent's own
`site:` token (`GET /api/v1/inventory`) and compare each target's `feeds` with it before
anything is polled. `meter:<role>` needs no inventory entry: a meter's readings only go
into the site's `facility` sample, which names no entity, so it is never checked here.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agents.collectors.base import Collector
from agents.facility.config import Entity, Target
from agents.facility.poller import FacilityPoller
from agents.inventory_client import InventoryFetchError, get_inventory

# Enough names to spot a typo in a line; a big site's full list would bury the message.
_LISTED = 12


class InventoryUnavailable(Exception):
    """The inventory could not be read, so the targets were not checked against it."""


@dataclass(frozen=True, slots=True)
class SiteEntities:
    """The names a site sample may carry: racks with their feeds, and cooling loops."""

    site: str
    racks: dict[str, tuple[str, ...]]  # rack name -> its feed names
    loops: tuple[str, ...]


def fetch_site_entities(server: str, token: str, timeout_s: float = 5.0) -> SiteEntities:
    """The site's racks, feeds and loops, read with the site's own source token."""
    try:
        data = get_inventory(server, token, timeout_s)
    except InventoryFetchError as exc:
        # 401 too: an older backend refuses site tokens here; not proof of a bad token.
        raise InventoryUnavailable(str(exc)) from None
    return parse_site_entities(data)


def parse_site_entities(data: Any) -> SiteEntities:
    try:
        racks = {
            str(rack["name"]): tuple(str(feed["name"]) for feed in rack.get("feeds") or ())
            for rack in data.get("racks") or ()
        }
        loops = tuple(str(loop["name"]) for loop in data.get("loops") or ())
        return SiteEntities(str(data["site"]["slug"]), racks, loops)
    except (KeyError, TypeError, AttributeError) as exc:
        raise InventoryUnavailable(f"the inventory is not in the expected shape: {exc!r}") from None


def facility_targets(collectors: Sequence[Collector]) -> list[Target]:
    """The parsed targets of the facility pollers among `collectors` (plugins have none)."""
    return [
        polled.target
        for collector in collectors
        if isinstance(collector, FacilityPoller)
        for polled in collector.targets
    ]


def unknown_entities(targets: Sequence[Target], site: SiteEntities) -> list[str]:
    """One line per target whose `feeds` the site does not have; empty when all are known."""
    lines = []
    for target in targets:
        problem = entity_problem(target.feeds, site)
        if problem is not None:
            lines.append(f"facility target {target.name!r}: feeds = {target.feeds}: {problem}")
    return lines


def entity_problem(entity: Entity, site: SiteEntities) -> str | None:
    """Why `entity` is not in the site's inventory, with the nearby names; None if it is."""
    if entity.kind == "loop" and entity.name not in site.loops:
        nearby = _nearby("its loops", entity.name, site.loops)
        return f"site {site.site} has no loop {entity.name!r}; {nearby}"
    if entity.kind in ("rack", "feed") and entity.name not in site.racks:
        nearby = _nearby("its racks", entity.name, site.racks)
        return f"site {site.site} has no rack {entity.name!r}; {nearby}"
    if entity.kind == "feed":
        feeds = site.racks[entity.name]
        if (entity.feed or "") not in feeds:
            nearby = _nearby("its feeds", entity.feed or "", feeds)
            return f"rack {entity.name} has no feed {entity.feed!r}; {nearby}"
    return None


def _nearby(what: str, wanted: str, names: Sequence[str] | dict[str, Any]) -> str:
    known = sorted(names)
    if not known:
        return f"{what}: none"
    close = difflib.get_close_matches(wanted, known, n=3, cutoff=0.6)
    listed = ", ".join(known[:_LISTED]) + (
        f", … ({len(known)} in all)" if len(known) > _LISTED else ""
    )
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return f"{hint}{what}: {listed}"


def check_site_inventory(server: str, token: str, collectors: Sequence[Collector]) -> list[str]:
    """The unknown-entity lines for the facility targets among `collectors`.

    Raises InventoryUnavailable when the inventory cannot be read (unreachable server,
    an HTTP error, a body of the wrong shape); a caller decides whether that is fatal.
    """
    targets = [t for t in facility_targets(collectors) if t.feeds.kind != "meter"]
    if not targets:
        return []  # nothing to check: no request, so a meters-only agent needs no inventory
    return unknown_entities(targets, fetch_site_entities(server, token))
