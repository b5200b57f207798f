"""Pages in a real browser (Playwright on Debian's chromium, tests/support/browser.py):
signing in as the ops user (tests/support/live.py makes it) and screenshots that must show
something."""

from __future__ import annotations

import contextlib
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.live import PASSWORD, USER, create_ops_user
from tests.support.server import FleetServer


@contextlib.contextmanager
def server_with_ops(var_dir: Path, **options: Any) -> Iterator[FleetServer]:
    """A started server of the test's own (FleetServer.started options) with the ops user
    to sign in as."""
    with FleetServer.started(var_dir, **options) as server:
        create_ops_user(server)
        yield server


def login(page, server: FleetServer) -> None:  # type: ignore[no-untyped-def]
    """Sign in as the ops user through the login form; wait for the fleet overview, its
    stylesheets included (`load`): a test that reads rendered text (`inner_text` applies CSS
    such as `text-transform`) must not race the stylesheet."""
    page.goto(server.url + "/admin/login/?next=/")
    page.fill("#id_username", USER)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("h1:has-text('Fleet overview')")
    page.wait_for_load_state("load")


def live_rack_page(browser, server: FleetServer, rack: str, node: str) -> tuple[Any, int]:  # type: ignore[no-untyped-def]
    """Signed in, on `rack`'s page with its live socket up: (the page, `node`'s id)."""
    rack_id = server.query(f"SELECT id FROM fleet_rack WHERE name = '{rack}'")[0][0]
    node_id = server.query(f"SELECT id FROM fleet_node WHERE name = '{node}'")[0][0]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    login(page, server)
    page.goto(f"{server.url}/racks/{rack_id}/")
    page.wait_for_selector("#live-status[data-state='live']")
    return page, node_id


def distinct_bytes(png: bytes) -> int:
    """How many distinct byte values the decoded pixel rows hold: a blank (one-colour)
    page gives a handful (the colour and the row filter bytes), a drawn page far more."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, data = 8, b""
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind = png[pos + 4 : pos + 8]
        if kind == b"IDAT":
            data += png[pos + 8 : pos + 8 + length]
        pos += 12 + length
    return len(set(zlib.decompress(data)))


def shot(page, path: Path) -> None:  # type: ignore[no-untyped-def]
    """A full-page screenshot at `path`, which must not be blank."""
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 0
    assert distinct_bytes(path.read_bytes()) > 32, f"{path.name} looks blank"
