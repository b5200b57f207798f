"""A listener that accepts connections and never answers: a Prometheus (or any HTTP server)
that has stalled. Each connection is held open until the client gives up or the listener
closes; `held()` says how many are open now, `accepted` how many came in."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from types import TracebackType


class StallingListener:
    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._sock, selectors.EVENT_READ)
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stalling-listener", daemon=True)
        self.accepted = 0
        self.first_accepted_at: float | None = None  # monotonic

    @property
    def url(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"http://{host}:{port}"

    def held(self) -> int:
        with self._lock:
            return len(self._conns)

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.05):
                if key.fileobj is self._sock:
                    self._accept()
                else:
                    self._read(key.fileobj)  # type: ignore[arg-type]

    def _accept(self) -> None:
        with contextlib.suppress(BlockingIOError):
            conn, _ = self._sock.accept()
            conn.setblocking(False)
            self._selector.register(conn, selectors.EVENT_READ)
            with self._lock:
                self._conns.append(conn)
                self.accepted += 1
                if self.first_accepted_at is None:
                    self.first_accepted_at = time.monotonic()

    def _read(self, conn: socket.socket) -> None:
        """Swallow the request; forget the connection once the client hangs up."""
        try:
            if conn.recv(65536):
                return
        except BlockingIOError:
            return
        except ConnectionError:
            pass
        self._selector.unregister(conn)
        conn.close()
        with self._lock:
            self._conns.remove(conn)

    def __enter__(self) -> StallingListener:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(5)
        with self._lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()
        self._selector.close()
        self._sock.close()
