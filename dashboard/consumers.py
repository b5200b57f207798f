"""Live consumers for browsers: they join a group and forward what arrives.

Group names come from `fleet.live` only; authorization happens at connect.
"""

from __future__ import annotations

from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from fleet.live import FLEET_GROUP


class FleetConsumer(AsyncJsonWebsocketConsumer):
    groups = [FLEET_GROUP]

    async def websocket_connect(self, message: dict[str, Any]) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        await super().websocket_connect(message)

    async def fleet_update(self, event: dict[str, Any]) -> None:
        await self.send_json(event["update"])
