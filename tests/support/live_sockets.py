"""The browsers' live sockets driven through Channels without a server (channels.testing
needs daphne, not installed): a socket to the live routes as a given user, what it was closed
with, and every live path of a site and rack. Fixtures a module binds to the names its tests
take (`site = live_sockets.two_rack_site`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from asgiref.testing import ApplicationCommunicator
from channels.routing import URLRouter
from django.contrib.auth.models import User

from dashboard import live_pages
from dashboard.routing import websocket_urlpatterns
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import GPU, Site
from tests.support.people import viewer

WAIT_S = 10


@pytest.fixture(autouse=True)
def fresh_hub() -> Iterator[None]:
    """Each test runs on its own event loop: its pages start on a hub of their own."""
    live_pages.get_hub.cache_clear()
    yield
    live_pages.get_hub.cache_clear()


@pytest.fixture
def two_rack_site() -> Site:
    """A01, A02 on CDU-1, a node of two GPUs each."""
    racks = (replace(DEMO_RACKS[0], nodes=1), replace(DEMO_RACKS[1], nodes=1))
    site = seed_demo_site("demo", racks, gpus_per_node=2)
    GPU.objects.update(slowdown_c=87.0, shutdown_c=92.0)
    return site


@pytest.fixture
def ops_viewer(site: Site) -> User:
    """A viewer of every site, once the module's `site` is seeded."""
    return viewer("ops", password="not-used")


class Socket(ApplicationCommunicator):  # type: ignore[misc]
    """A browser's socket to the live routes (channels.testing needs daphne, not installed)."""

    async def connect(self, timeout: float = WAIT_S) -> tuple[bool, int | None]:
        await self.send_input({"type": "websocket.connect"})
        message = await self.receive_output(timeout)
        return message["type"] == "websocket.accept", None

    async def receive_json_from(self, timeout: float = WAIT_S) -> Any:
        message = await self.receive_output(timeout)
        assert message["type"] == "websocket.send", message
        return json.loads(message["text"])

    async def page_showing(self, text: str, timeout: float = WAIT_S) -> str:
        """The first page pushed that shows `text` (a served page may first be sent as it
        was when the socket joined)."""
        while True:
            html = str((await self.receive_json_from(timeout))["html"])
            if text in html:
                return html

    async def disconnect(self) -> None:
        await self.send_input({"type": "websocket.disconnect", "code": 1000})
        await self.wait(WAIT_S)


def socket(path: str, user: Any) -> Socket:
    router = URLRouter(websocket_urlpatterns)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> Any:
        return await router({**scope, "user": user}, receive, send)

    scope = {"type": "websocket", "path": path, "headers": [], "query_string": b""}
    return Socket(app, {**scope, "subprotocols": []})


async def closed_with(communicator: Socket) -> int:
    connected, _ = await communicator.connect()
    assert connected  # accepted, then closed with a code the page understands
    message = await communicator.receive_output(WAIT_S)
    assert message["type"] == "websocket.close"
    return int(message["code"])


def live_paths(site_id: int, rack_id: int) -> tuple[str, ...]:
    return (
        "/ws/live/fleet",
        f"/ws/live/site/{site_id}",
        f"/ws/live/rack/{rack_id}",
        f"/ws/live/rack/{rack_id}/changed",
        f"/ws/live/rack/{rack_id}/page",
        "/ws/live/cooling",
    )
