"""Live pages rendered on the server: one render per page per process, however many
browsers watch it.

The rack and cooling pages say a great deal in words (N+1 lines, decoded clock-event
reasons, "no data for 14 s"), all of it written once in `dashboard/rack.py`,
`dashboard/cooling.py` and their templates. Rather than repeat those words in
JavaScript, a live page is sent the same HTML the server renders for it, and
`static/dashboard/live.js` morphs it into the page (only what changed moves, so focus
and scroll stay put).

A browser's consumer pokes the `PageHub` whenever its Channels group says something
changed. Every consumer of the same page in this process receives the same group
message, so the pokes of one publish coalesce into one render; renders of a page are
at least `every_s` apart; a page is rendered when a browser joins it (a page back from an
outage or a hidden tab is current at once), and a page nobody pokes is rendered again every
`QUIET_REFRESH_S` so that figures which stopped arriving turn into their age instead of
staying frozen as numbers. Rendering reads the latest state on the hub's own thread,
never the event loop and never the thread Django's sync views share.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("dashboard.live")

QUIET_REFRESH_S = 5.0  # a page with no pushes is rendered again this often (ages move on)
COOLING_EVERY_S = 2.0  # the cooling page reads every loop and the racks on them: at most 0.5/s
LOG_EVERY_S = 60.0

Payload = dict[str, Any]
Render = Callable[[], Payload]
Send = Callable[[Payload], Awaitable[None]]


@dataclass(eq=False)
class _Page:
    render: Render
    every_s: float
    subscribers: set[Send] = field(default_factory=set)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    renders: int = 0


@dataclass
class PageHub:
    """Per-process renderer of live pages, keyed by what a page shows (a rack, the
    cooling loops a set of sites sees)."""

    quiet_refresh_s: float = QUIET_REFRESH_S
    pages: dict[Hashable, _Page] = field(default_factory=dict)
    failures: int = 0
    _logged_at: float = 0.0

    def join(self, key: Hashable, render: Render, send: Send, every_s: float) -> None:
        page = self.pages.get(key)
        if page is None:
            page = self.pages[key] = _Page(render, every_s)
        page.subscribers.add(send)
        # Render for the newcomer now: a page that reconnects (after an outage, a hidden
        # tab) must not show what it held before as live until the next change.
        page.wake.set()
        if page.task is None or page.task.done():
            page.task = asyncio.ensure_future(self._run(key, page))

    def leave(self, key: Hashable, send: Send) -> None:
        page = self.pages.get(key)
        if page is not None:
            page.subscribers.discard(send)
            page.wake.set()  # let its loop see it is unwatched and end

    def poke(self, key: Hashable) -> None:
        """Something on the page changed: render it again (coalesced with other pokes)."""
        page = self.pages.get(key)
        if page is not None:
            page.wake.set()

    def renders(self, key: Hashable) -> int:
        page = self.pages.get(key)
        return 0 if page is None else page.renders

    async def _run(self, key: Hashable, page: _Page) -> None:
        loop = asyncio.get_running_loop()
        while True:
            # Nothing pushed for a while: render anyway, so ages move on.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(page.wake.wait(), self.quiet_refresh_s)
            page.wake.clear()
            if not page.subscribers:
                # No await between this check and the removal: a join cannot slip in.
                if self.pages.get(key) is page:
                    del self.pages[key]
                return
            try:
                payload = await loop.run_in_executor(_renderer(), _render_with_db, page.render)
            except Exception as exc:  # a page update is never worth a crash
                self.failures += 1
                self._log_failure(key, exc)
            else:
                page.renders += 1
                await asyncio.gather(
                    *(send(payload) for send in list(page.subscribers)), return_exceptions=True
                )
            await asyncio.sleep(page.every_s)  # coalesce: pokes meanwhile make one render

    def _log_failure(self, key: Hashable, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_S:
            self._logged_at = now
            log.warning("could not render live page %r: %r (%d so far)", key, exc, self.failures)


def _render_with_db(render: Render) -> Payload:
    """Runs on the hub's thread, whose Django connection stays open between renders
    (reopening it twice a second is measurable); a connection the database dropped is
    closed so the next query reopens it."""
    from django.db import connection

    if connection.connection is not None and not connection.is_usable():
        connection.close()
    try:
        return render()
    except Exception:
        connection.close()
        raise


@functools.cache
def _renderer() -> ThreadPoolExecutor:
    """One thread for every live page of this process: renders never run two at once."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="live-pages")


@functools.cache
def get_hub() -> PageHub:
    """The process's one hub (a test starts a new one with `get_hub.cache_clear()`)."""
    return PageHub()


def rack_live(rack_id: int) -> Payload:
    """The rack page's live region as of now (what `templates/dashboard/rack.html`
    includes), or a line saying the rack is gone."""
    from django.template.loader import render_to_string

    from dashboard.rack import rack_page
    from fleet.words import as_of

    now = time.time()
    page = rack_page(rack_id, now)
    if page is None:
        return {"ts": now, "as_of": as_of(now), "gone": True, "html": _GONE}
    html = render_to_string("dashboard/rack_live.html", {"rack": page})
    return {"ts": now, "as_of": page.as_of, "html": html}


def cooling_live(site_ids: frozenset[int] | None) -> Payload:
    """The cooling page's live region as of now, for a viewer of `site_ids` (None: all)."""
    from django.template.loader import render_to_string

    from dashboard.cooling import cooling_page

    page = cooling_page(time.time(), site_ids)
    html = render_to_string("dashboard/cooling_live.html", {"page": page})
    return {"ts": time.time(), "as_of": page.as_of, "html": html}


_GONE = '<p class="level-line" data-level="unknown">This rack is no longer in the inventory.</p>'
