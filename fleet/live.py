"""Live updates to browsers: the one place that names Channels groups.

The ingest writer computes per-node and per-rack figures every live interval;
the server process that owns the writer pushes them here. Consumers in
`dashboard/consumers.py` only forward what arrives.
"""

from __future__ import annotations

from typing import Any

from channels.layers import get_channel_layer

FLEET_GROUP = "fleet"

FLEET_UPDATE = "fleet.update"


async def publish_fleet_update(update: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    await layer.group_send(FLEET_GROUP, {"type": FLEET_UPDATE, "update": update})
