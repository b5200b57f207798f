"""The fleet overview page's content: every rack's state from `fleet.state`.

The figures and levels come from `fleet.health` on the server; the page's
JavaScript (static/dashboard/fleet.js) renders the payloads it is pushed and
computes nothing but how old a figure is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fleet.health import STALE_AFTER_S
from fleet.models import Rack
from fleet.state import rack_payload, rack_states

COOLING_LABELS = dict(Rack._meta.get_field("cooling").choices or [])


@dataclass
class RackTile:
    id: int
    name: str
    cooling: str
    cooling_label: str
    loop_id: int | None  # the tile links its loop to the cooling page
    data: dict[str, Any]


def fleet_overview(now: float) -> tuple[dict[str, list[RackTile]], dict[str, Any]]:
    """Racks grouped by hall (in floor order), and the page's initial payload."""
    halls: dict[str, list[RackTile]] = {}
    racks: dict[str, Any] = {}
    for rack_id, state in rack_states(None, now).items():
        data = rack_payload(state)
        racks[str(rack_id)] = data
        cooling = state.info.cooling
        label = COOLING_LABELS.get(cooling, "")
        tile = RackTile(rack_id, state.info.name, cooling, label, state.info.loop_id, data)
        halls.setdefault(state.info.hall, []).append(tile)
    return halls, {"now": now, "racks": racks, "stale_after_s": STALE_AFTER_S}
