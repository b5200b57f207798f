"""Live sockets for browsers: who may watch what is decided at connect, through
`fleet.access`; group names come from `fleet.read.live` only.

Forwarded as they come (the payloads of `fleet.read.payloads`, rendered by the page's own
script through `static/dashboard/live.js`):

- `/ws/live/fleet` (the overview): the groups of the sites the user sees.
- `/ws/live/site/<id>`: one site's racks, loops and facility figures.
- `/ws/live/rack/<id>`: one rack with its nodes, GPUs, feeds and liquid.
- `/ws/live/rack/<id>/changed`: only `{"ts"}` when something of the rack changed (a page
  that fetches its own figures then; the publisher builds none for it).

Pages the server renders (rack, cooling): a group message only says something changed;
the page's HTML is rendered again by the process's `PageHub` (once however many browsers
watch it) and sent as `{"ts", "as_of", "html"}` for `live.js` to morph in:

- `/ws/live/rack/<id>/page` (the rack page), `/ws/live/cooling` (every loop the user sees).

Close codes the pages understand: 4401 not signed in (back to the login), 4000 the
routine session re-check (reconnect at once), 4403 not allowed: a site or rack the user
may not see, or that does not exist (the same answer, so ids reveal nothing), or any socket
of a person with no role.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from dashboard.browser_json import to_json
from dashboard.live_pages import COOLING_EVERY_S, Payload, Render, cooling_live, get_hub, rack_live
from fleet.access import can_view_site, has_any_role, visible_site_ids
from fleet.models import Rack, Site
from fleet.read.live import rack_changed_group, rack_group, site_group

CLOSE_UNAUTHORIZED = 4401
CLOSE_REAUTHENTICATE = 4000
CLOSE_NOT_ALLOWED = 4403


def _visible_sites(user: Any) -> list[int]:
    sites = visible_site_ids(user)
    ids = Site.objects.values_list("id", flat=True).order_by("id")
    return list(ids if sites is None else ids.filter(id__in=sites))


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """A page's socket: refuses a visitor, joins the groups `groups_for` names, and ends
    itself every `LIVE_REAUTH_S` so a user who logged out (or lost access) stops
    receiving when the page reconnects."""

    _expiry: asyncio.TimerHandle | None = None

    @classmethod
    async def encode_json(cls, content: Any) -> str:
        # Every watching socket encodes each push: compact and fast (dashboard/browser_json.py).
        return to_json(content)

    def groups_for(self, user: Any) -> list[str] | None:
        """The groups this user may watch on this socket; None: not allowed (or no such).
        Runs in a thread (it may read the inventory)."""
        raise NotImplementedError

    async def websocket_connect(self, message: dict[str, Any]) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self._refuse(CLOSE_UNAUTHORIZED)  # accept, then a code the page reads
            return
        groups = await database_sync_to_async(self._allowed_groups)(user)
        if groups is None:
            await self._refuse(CLOSE_NOT_ALLOWED)
            return
        self.groups = groups
        await super().websocket_connect(message)
        self._expiry = asyncio.get_running_loop().call_later(
            settings.LIVE_REAUTH_S, lambda: asyncio.ensure_future(self._reauthenticate())
        )
        await self.watching()

    def _allowed_groups(self, user: Any) -> list[str] | None:
        # A person with no role watches nothing, not even an empty overview.
        return self.groups_for(user) if has_any_role(user) else None

    async def watching(self) -> None:
        """Called once the socket is accepted and its groups joined."""

    async def _refuse(self, code: int) -> None:
        await self.accept()
        await self.close(code=code)

    async def _reauthenticate(self) -> None:
        await self.close(code=CLOSE_REAUTHENTICATE)

    async def websocket_disconnect(self, message: dict[str, Any]) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        await super().websocket_disconnect(message)


def _rack_site(rack_id: int) -> int | None:
    return Rack.objects.filter(id=rack_id).values_list("hall__site_id", flat=True).first()


def _may_see_rack(user: Any, rack_id: int) -> bool:
    site_id = _rack_site(rack_id)
    return site_id is not None and can_view_site(user, site_id)


def _rack_groups(user: Any, rack_id: int) -> list[str] | None:
    return [rack_group(rack_id)] if _may_see_rack(user, rack_id) else None


class ForwardingConsumer(LiveConsumer):
    """Sends each group message on as it comes: the page's script renders it."""

    async def live_update(self, event: dict[str, Any]) -> None:
        await self.send_json(event["update"])


class FleetConsumer(ForwardingConsumer):
    """The fleet overview: the rack states of every site the user sees, as pushed."""

    def groups_for(self, user: Any) -> list[str] | None:
        return [site_group(site_id) for site_id in _visible_sites(user)]


class SiteConsumer(ForwardingConsumer):
    """One site's racks, loops and facility figures, for a user who may see it."""

    def groups_for(self, user: Any) -> list[str] | None:
        site_id = int(self.scope["url_route"]["kwargs"]["site_id"])
        if not Site.objects.filter(id=site_id).exists() or not can_view_site(user, site_id):
            return None
        return [site_group(site_id)]


class RackConsumer(ForwardingConsumer):
    """One rack with its nodes and each GPU (the GPU and node pages read it)."""

    def groups_for(self, user: Any) -> list[str] | None:
        return _rack_groups(user, int(self.scope["url_route"]["kwargs"]["rack_id"]))


class RackSignalConsumer(ForwardingConsumer):
    """Only `{"ts"}` when something of the rack changed: for a page that fetches or
    renders its own figures then (the publisher builds no rack figures for it)."""

    def groups_for(self, user: Any) -> list[str] | None:
        rack_id = int(self.scope["url_route"]["kwargs"]["rack_id"])
        return [rack_changed_group(rack_id)] if _may_see_rack(user, rack_id) else None


class ServedPageConsumer(LiveConsumer):
    """A page the server renders: group messages poke the hub, which renders the page
    once for this process and sends it to every socket watching it."""

    page_key: Hashable = None
    renderer: Render | None = None
    every_s: float = 0.0

    async def watching(self) -> None:
        assert self.renderer is not None
        get_hub().join(self.page_key, self.renderer, self._send_page, self.every_s)

    async def _send_page(self, payload: Payload) -> None:
        await self.send_json(payload)

    async def live_update(self, event: dict[str, Any]) -> None:
        get_hub().poke(self.page_key)

    async def websocket_disconnect(self, message: dict[str, Any]) -> None:
        if self.renderer is not None:
            get_hub().leave(self.page_key, self._send_page)
        await super().websocket_disconnect(message)


class RackPageConsumer(ServedPageConsumer):
    """One rack's page, for a user who may see its site."""

    def groups_for(self, user: Any) -> list[str] | None:
        rack_id = int(self.scope["url_route"]["kwargs"]["rack_id"])
        if not _may_see_rack(user, rack_id):
            return None
        self.page_key = ("rack", rack_id)
        self.renderer = lambda: rack_live(rack_id)
        self.every_s = settings.LIVE_INTERVAL_S
        # Only the signal: the page renders itself from the latest state, so the
        # publisher need not build the rack's per-GPU message for it.
        return [rack_changed_group(rack_id)]


class CoolingConsumer(ServedPageConsumer):
    """Every loop of the sites the user sees; any change in those sites (their racks,
    loops, facility) pokes it."""

    def groups_for(self, user: Any) -> list[str] | None:
        sites = visible_site_ids(user)
        seen = None if sites is None else frozenset(sites)
        self.page_key = ("cooling", seen)
        self.renderer = lambda: cooling_live(seen)
        self.every_s = max(settings.LIVE_INTERVAL_S, COOLING_EVERY_S)
        return [site_group(site_id) for site_id in _visible_sites(user)]
