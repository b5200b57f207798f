"""One background asyncio loop for the libraries that only speak asyncio (pysnmp's v3 API).

Collectors are synchronous (`collect(now)`); they hand coroutines to this loop and
wait for the answer. One loop for the whole agent keeps pysnmp's engine, which is
costly to build, shared by every SNMPv3 target.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="facility-aio", daemon=True)
            thread.start()
            _loop = loop
        return _loop


def run(coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
    """Run `coro` on the background loop and wait at most `timeout_s` for it."""
    future = asyncio.run_coroutine_threadsafe(coro, background_loop())
    try:
        return future.result(timeout_s)
    except TimeoutError:
        future.cancel()
        raise
