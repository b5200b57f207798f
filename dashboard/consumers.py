"""Live consumers for browsers: they join a group and forward what arrives.

Group names come from `fleet.live` only; authorization happens at connect.
"""

from __future__ import annotations

import asyncio
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from fleet.live import site_group
from fleet.models import Site

CLOSE_UNAUTHORIZED = 4401
CLOSE_REAUTHENTICATE = 4000


def _site_ids() -> list[int]:
    return list(Site.objects.values_list("id", flat=True))


class FleetConsumer(AsyncJsonWebsocketConsumer):
    """The fleet overview: every site's rack states (per-site roles come with the views)."""

    _expiry: asyncio.TimerHandle | None = None

    async def websocket_connect(self, message: dict[str, Any]) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            # Accept, then close with a code the page understands (back to the login).
            await self.accept()
            await self.close(code=CLOSE_UNAUTHORIZED)
            return
        self.groups = [site_group(site_id) for site_id in await database_sync_to_async(_site_ids)()]
        await super().websocket_connect(message)
        # The session is checked only at connect: end the socket now and then so the
        # page reconnects and a user who logged out (or was deactivated) stops receiving.
        self._expiry = asyncio.get_running_loop().call_later(
            settings.LIVE_REAUTH_S, lambda: asyncio.ensure_future(self._reauthenticate())
        )

    async def _reauthenticate(self) -> None:
        await self.close(code=CLOSE_REAUTHENTICATE)

    async def websocket_disconnect(self, message: dict[str, Any]) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        await super().websocket_disconnect(message)

    async def live_update(self, event: dict[str, Any]) -> None:
        await self.send_json(event["update"])
