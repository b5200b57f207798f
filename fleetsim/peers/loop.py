"""Run asyncio peers from synchronous code (tests, the benchmark) on a private loop thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class PeerLoop:
    """An event loop on its own thread; `call(coro)` runs a coroutine there and waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="peers", daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        self.loop.close()
