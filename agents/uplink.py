"""The uplink: sends spooled batches to the backend and deletes each one on the server's ack.

WebSocket first (`/ws/ingest/v1`, several batches in flight, one ack or nack frame per
batch). When the WebSocket cannot be opened a few times running, the same batches go by
HTTP `POST /api/v1/ingest` until the WebSocket comes back. Reconnects back off
exponentially with full jitter, so a thousand agents do not return in lockstep after a
backend restart.

What the server says decides what happens to a batch (docs/protocol.md):
ack → delete; nack → delete and log (resending cannot help); no answer → it stays in the
spool and goes again on the next connection. A rejected token (close 4401, HTTP 401) or a
source mismatch (4403, 403) stops the uplink with `UplinkRejected`: retrying would only
hammer the server, and the operator has to re-enrol.

An answer that carries the server's time `t` also measures the server's clock against the
agent's wall clock (`clock_offset`, agents/clock.py); answers without it count the same.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from agents.clock import ClockOffset
from agents.log import get_logger
from agents.protocol import (
    CLOSE_FORBIDDEN,
    CLOSE_UNAUTHORIZED,
    HTTP_INGEST_PATH,
    MAX_BATCH_BYTES,
    WS_PATH,
)
from agents.spool import Spool

log = get_logger("agents.uplink")


class UplinkRejected(Exception):
    """The server refused this agent's credentials: re-enrol, do not retry."""


@dataclass(slots=True)
class UplinkSettings:
    server: str
    token: str
    source: str
    max_in_flight: int = 32
    backoff_base_s: float = 0.5
    backoff_cap_s: float = 30.0
    open_timeout_s: float = 10.0
    http_fallback: bool = True
    ws_failures_before_http: int = 2
    ws_retry_after_http_s: float = 60.0
    http_timeout_s: float = 10.0


@dataclass(slots=True)
class UplinkStats:
    sent: int = 0
    acked: int = 0
    nacked: int = 0
    partly_refused: int = 0  # acked, but the server refused part (e.g. a GPU not in inventory)
    connects: int = 0
    http_posts: int = 0


REFUSAL_LOG_EVERY_S = 600.0


class PartRefusals:
    """An ack that carries `refused` (docs/protocol.md "Unknown GPUs"): the batch was stored
    but for the part named. Logged as a warning once per field and reason every 10 min —
    the same refusal comes with every batch until someone accepts the GPU."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._logged: dict[tuple[str, str], float] = {}

    def note(self, source: str, refused: Any) -> None:
        if not isinstance(refused, dict):
            return
        key = (str(refused.get("field")), str(refused.get("reason")))
        now = self._clock()
        last = self._logged.get(key)
        if last is not None and now - last < REFUSAL_LOG_EVERY_S:
            return
        self._logged[key] = now
        log.warning(
            "server stored the batch but refused part of it",
            source=source,
            field=key[0],
            reason=key[1],
        )


def websocket_url(server: str) -> str:
    parts = urlsplit(server)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + WS_PATH, "", ""))


def http_url(server: str, path: str) -> str:
    parts = urlsplit(server)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + path, "", ""))


def _server_time(body: str) -> Any:
    """The server's `t` in an HTTP answer's JSON body, or None."""
    return _answer_field(body, "t")


def _answer_field(body: str, name: str) -> Any:
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    return answer.get(name) if isinstance(answer, dict) else None


def backoff_delay(attempt: int, base_s: float, cap_s: float) -> float:
    """Full jitter: uniform in [0, min(cap, base·2^attempt)], never quite zero."""
    ceiling = min(cap_s, base_s * (2 ** min(attempt, 30)))
    return max(0.05, random.uniform(0, ceiling))


class Uplink:
    def __init__(
        self,
        settings: UplinkSettings,
        spool: Spool,
        clock_offset: ClockOffset | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.spool = spool
        self.stats = UplinkStats()
        self.part_refusals = PartRefusals()
        # Passed in so that it outlives this uplink (the outbox replaces it after a pause).
        self.clock_offset = clock_offset if clock_offset is not None else ClockOffset()
        self._wall = wall  # the wall clock, not the agent's slewed one: the offset is its error
        self.connected = False
        self.rejected: str | None = None
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._hurry = asyncio.Event()  # set by flush(): skip the rest of a backoff wait
        self._in_flight: set[int] = set()
        self._sent_at: dict[int, float] = {}  # seq -> wall time it went out (this session)
        self._last_sent = -1

    # -- the API the agent and the simulator use ------------------------------------------

    def notify(self) -> None:
        """A new batch is in the spool."""
        self._wake.set()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    async def flush(self, timeout_s: float) -> bool:
        """Wait until the server acknowledged everything spooled, up to `timeout_s`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        self._hurry.set()
        while len(self.spool) and loop.time() < deadline and self.rejected is None:
            await asyncio.sleep(0.02)
        return len(self.spool) == 0

    async def run(self) -> None:
        """Keep delivering until `stop()`; raises `UplinkRejected` if the server refuses us."""
        try:
            await self._deliver()
        except UplinkRejected as exc:
            self.rejected = str(exc)
            log.error("server rejected this agent", source=self.settings.source, why=str(exc))
            raise

    async def _deliver(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            connects_before = self.stats.connects
            try:
                await self._websocket_session()
                failures = 0
            except (OSError, ConnectionClosed, InvalidHandshake, TimeoutError) as exc:
                # A session that worked and then dropped starts the backoff afresh.
                failures = 1 if self.stats.connects > connects_before else failures + 1
                log.debug("websocket unavailable", source=self.settings.source, error=repr(exc))
            if self._stopping.is_set():
                break
            fallback = self.settings.http_fallback
            wanted = fallback and failures >= self.settings.ws_failures_before_http
            if wanted and await self._http_mode():
                failures = 0
                continue
            delay = backoff_delay(
                failures, self.settings.backoff_base_s, self.settings.backoff_cap_s
            )
            await self._sleep(delay)

    # -- WebSocket -------------------------------------------------------------------------

    async def _websocket_session(self) -> None:
        headers = {"Authorization": f"Bearer {self.settings.token}"}
        try:
            ws = await connect(
                websocket_url(self.settings.server),
                additional_headers=headers,
                open_timeout=self.settings.open_timeout_s,
                compression=None,  # CPU matters more than bytes at one small batch a second
                max_size=MAX_BATCH_BYTES,
                close_timeout=2.0,  # a dead server must not hold up a shutdown
            )
        except InvalidStatus as exc:
            # 401 is the server's answer; a 403/404 at the handshake is more likely a proxy
            # that does not pass WebSockets: that is what the HTTP fallback is for.
            if exc.response.status_code == 401:
                raise UplinkRejected("HTTP 401 on the WebSocket handshake") from exc
            raise
        self._on_connected("websocket")
        self._in_flight.clear()
        self._sent_at.clear()
        self._last_sent = -1
        sender = asyncio.create_task(self._send_loop(ws))
        receiver = asyncio.create_task(self._receive_loop(ws))
        stopper = asyncio.create_task(self._stopping.wait())
        try:
            done, _ = await asyncio.wait(
                {sender, receiver, stopper}, return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                if task is not stopper:
                    task.result()  # re-raise what ended the session
        finally:
            for task in (sender, receiver, stopper):
                task.cancel()
            await ws.close()
            self.connected = False
        if not self._stopping.is_set():
            raise ConnectionError("websocket session ended")

    async def _send_loop(self, ws: ClientConnection) -> None:
        while True:
            self._wake.clear()
            room = self.settings.max_in_flight - len(self._in_flight)
            for seq in self.spool.pending_after(self._last_sent, room):
                payload = self.spool.read(seq)
                self._last_sent = seq
                if payload is None:
                    continue
                self._in_flight.add(seq)
                self._sent_at[seq] = self._wall()
                await ws.send(payload.decode())
                self.stats.sent += 1
            await self._wake.wait()

    async def _receive_loop(self, ws: ClientConnection) -> None:
        try:
            async for frame in ws:
                self._on_answer(json.loads(frame))
        except ConnectionClosed as exc:
            self._raise_if_rejected(exc)
            raise
        # A clean close by the server (1000/1001): reconnect.
        if ws.close_code is not None:
            self._raise_if_rejected_code(ws.close_code, ws.close_reason or "")

    def _raise_if_rejected(self, exc: ConnectionClosed) -> None:
        if exc.rcvd is not None:
            self._raise_if_rejected_code(exc.rcvd.code, exc.rcvd.reason)

    @staticmethod
    def _raise_if_rejected_code(code: int, reason: str) -> None:
        if code == CLOSE_UNAUTHORIZED:
            raise UplinkRejected(f"token unknown or revoked (close {code} {reason})".strip())
        if code == CLOSE_FORBIDDEN:
            raise UplinkRejected(f"batch for another source (close {code} {reason})".strip())

    def _on_answer(self, answer: Any) -> None:
        received = self._wall()
        if not isinstance(answer, dict):
            log.warning("unexpected frame from server", frame=repr(answer)[:200])
            return
        if "ack" in answer and isinstance(answer["ack"], int):
            self._measure_offset(self._sent_at.get(answer["ack"]), received, answer.get("t"))
            self._settle(answer["ack"])
            self.stats.acked += 1
            if "refused" in answer:
                self._note_part_refused(answer["refused"])
        elif "nack" in answer:
            seq = answer["nack"]
            log.error(
                "server refused a batch; dropping it",
                source=self.settings.source,
                seq=seq,
                error=answer.get("error"),
            )
            if isinstance(seq, int):
                self._measure_offset(self._sent_at.get(seq), received, answer.get("t"))
                self._settle(seq)
                self.stats.nacked += 1

    def _note_part_refused(self, refused: Any) -> None:
        self.stats.partly_refused += 1
        self.part_refusals.note(self.settings.source, refused)

    def _settle(self, seq: int) -> None:
        self.spool.remove(seq)
        self._in_flight.discard(seq)
        self._sent_at.pop(seq, None)
        self._wake.set()  # room in the window

    def _measure_offset(self, sent: float | None, received: float, server_time: Any) -> None:
        """Old servers send no `t` (and a resend from an earlier session has no send time):
        nothing to measure then, and the ack counts all the same."""
        if sent is not None and server_time is not None:
            self.clock_offset.measure(sent, received, server_time)

    # -- HTTP fallback ---------------------------------------------------------------------

    async def _http_mode(self) -> bool:
        """Deliver by HTTP until it is time to try the WebSocket again; False if HTTP fails."""
        loop = asyncio.get_running_loop()
        retry_ws_at = loop.time() + self.settings.ws_retry_after_http_s
        first = True
        while not self._stopping.is_set() and loop.time() < retry_ws_at:
            self._wake.clear()
            if not await self._drain_http():
                return not first
            if first:
                self._on_connected("http")
                first = False
            await self._sleep(retry_ws_at - loop.time(), wake_on_batch=True)
        self.connected = False
        return True

    async def _drain_http(self) -> bool:
        for seq in self.spool.pending_after(-1, len(self.spool)):
            payload = self.spool.read(seq)
            if payload is None:
                continue
            sent = self._wall()
            status, body = await asyncio.to_thread(self._post, payload)
            self._measure_offset(sent, self._wall(), _server_time(body))
            self.stats.http_posts += 1
            if status == 200:
                self.spool.remove(seq)
                self.stats.acked += 1
                refused = _answer_field(body, "refused")
                if refused is not None:
                    self._note_part_refused(refused)
            elif status in (400, 413):
                log.error("server refused a batch; dropping it", seq=seq, status=status, error=body)
                self.spool.remove(seq)
                self.stats.nacked += 1
            elif status in (401, 403):
                raise UplinkRejected(f"HTTP {status} from {HTTP_INGEST_PATH}: {body}")
            else:
                return False
        return True

    def _post(self, payload: bytes) -> tuple[int, str]:
        request = urllib.request.Request(
            http_url(self.settings.server, HTTP_INGEST_PATH),
            data=payload,
            method="POST",
            headers={
                "Authorization": f"Bearer {self.settings.token}",
                "Content-Type": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.settings.http_timeout_s) as resp:
                return resp.status, resp.read(4096).decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(4096).decode(errors="replace")
        except (OSError, ValueError):
            return 0, ""

    # -- helpers ---------------------------------------------------------------------------

    def _on_connected(self, transport: str) -> None:
        self.connected = True
        self.stats.connects += 1
        log.info(
            "uplink connected",
            source=self.settings.source,
            transport=transport,
            pending=len(self.spool),
            dropped_batches=self.spool.dropped_batches,
        )

    async def _sleep(self, seconds: float, wake_on_batch: bool = False) -> None:
        waits: list[Awaitable[Any]] = [self._stopping.wait(), self._hurry.wait()]
        if wake_on_batch:
            waits.append(self._wake.wait())
        tasks = [asyncio.ensure_future(w) for w in waits]
        try:
            await asyncio.wait(
                tasks, timeout=max(0.0, seconds), return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for task in tasks:
                task.cancel()
