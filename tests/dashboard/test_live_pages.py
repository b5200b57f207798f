"""The per-process renderer of live pages (`dashboard.live_pages.PageHub`): many browsers
on one page cost one render per update, a quiet page is rendered again so ages move on,
a failed render never ends the page's updates, and a page nobody watches is let go."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from dashboard.live_pages import PageHub, Payload

WAIT_S = 10.0  # generous: a bound on a hang, not a timing assertion


async def until(condition: Callable[[], bool]) -> None:
    """Poll on the loop (the hub renders on it) until `condition` holds, at most WAIT_S."""
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.01)


class Renders:
    """A render that counts its calls and can be told to fail."""

    def __init__(self, failures: int = 0) -> None:
        self.calls = 0
        self.failures = failures

    def __call__(self) -> Payload:
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError("database away")
        return {"render": self.calls}


class Browser:
    """One socket's send: keeps what it was sent and lets a test wait for the next one."""

    def __init__(self) -> None:
        self.received: list[Payload] = []
        self.arrived = asyncio.Event()

    async def send(self, payload: Payload) -> None:
        self.received.append(payload)
        self.arrived.set()

    async def next(self) -> Payload:
        await asyncio.wait_for(self.arrived.wait(), WAIT_S)
        self.arrived.clear()
        return self.received[-1]


async def test_three_browsers_on_one_page_cost_one_render_per_update() -> None:
    hub, render = PageHub(quiet_refresh_s=60), Renders()
    browsers = [Browser() for _ in range(3)]
    for browser in browsers:
        hub.join("rack-1", render, browser.send, every_s=0.01)
    for _ in browsers:  # each socket got the same group message and pokes
        hub.poke("rack-1")
    payloads = [await b.next() for b in browsers]
    assert payloads == [{"render": 1}] * 3
    assert render.calls == 1


async def test_a_browser_joining_gets_the_page_at_once_without_waiting_for_a_change() -> None:
    hub, render = PageHub(quiet_refresh_s=60), Renders()
    first, second = Browser(), Browser()
    hub.join("rack-1", render, first.send, every_s=0.01)
    assert await first.next() == {"render": 1}
    hub.join("rack-1", render, second.send, every_s=0.01)  # e.g. a tab shown again
    assert await second.next() == {"render": 2}


async def test_pokes_during_a_render_make_one_more_render_not_one_each() -> None:
    hub, render = PageHub(quiet_refresh_s=60), Renders()
    browser = Browser()
    every_s = 0.2
    hub.join("cooling", render, browser.send, every_s=every_s)
    hub.poke("cooling")
    await browser.next()
    for _ in range(5):  # five publishes while the page is held back by every_s
        hub.poke("cooling")
    assert await browser.next() == {"render": 2}
    # An extra render would come at most every_s after the last: wait past that bound.
    await asyncio.sleep(2 * every_s)
    assert render.calls == 2


async def test_a_page_nobody_pokes_is_rendered_again_so_its_ages_move_on() -> None:
    hub, render = PageHub(quiet_refresh_s=0.05), Renders()
    browser = Browser()
    hub.join("rack-1", render, browser.send, every_s=0.01)
    assert await browser.next() == {"render": 1}
    assert await browser.next() == {"render": 2}


async def test_a_failed_render_is_counted_and_the_next_update_still_arrives() -> None:
    hub, render = PageHub(quiet_refresh_s=60), Renders(failures=1)
    browser = Browser()
    hub.join("rack-1", render, browser.send, every_s=0.01)
    hub.poke("rack-1")
    await until(lambda: hub.failures == 1)  # the first render has failed
    hub.poke("rack-1")
    assert await browser.next() == {"render": 2}
    assert hub.failures == 1


async def test_a_browser_that_cannot_be_sent_to_does_not_stop_the_others() -> None:
    hub, render = PageHub(quiet_refresh_s=60), Renders()

    async def broken(payload: Any) -> None:
        raise ConnectionError("socket gone")

    browser = Browser()
    hub.join("rack-1", render, broken, every_s=0.01)
    hub.join("rack-1", render, browser.send, every_s=0.01)
    hub.poke("rack-1")
    assert await browser.next() == {"render": 1}


async def test_the_last_browser_leaving_lets_the_page_go() -> None:
    hub, render = PageHub(quiet_refresh_s=60), Renders()
    browser = Browser()
    hub.join("rack-1", render, browser.send, every_s=0.01)
    task = hub.pages["rack-1"].task
    assert task is not None
    hub.leave("rack-1", browser.send)
    await asyncio.wait_for(task, WAIT_S)
    assert "rack-1" not in hub.pages
    hub.poke("rack-1")  # a late group message for it is harmless
    assert render.calls == 0
