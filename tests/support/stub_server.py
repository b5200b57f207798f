"""A small stand-in for the backend's agent API, served by uvicorn on a real loopback port.

It speaks docs/protocol.md (enrol, inventory, WebSocket and HTTP ingest, acks, nacks, close
codes), validates with the protocol's own validator, and stores samples idempotently by
(kind, source, entity, ts) like the real backend, while counting every delivery so tests can
tell "sent twice" from "stored twice". Its store outlives `stop()`/`start()`, as a database
outlives a server restart.

By default its acks carry no server time (`t`), like a server from before it was added;
set `clock_skew_s` and every answer carries `t`, from a server clock that far ahead.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from agents.protocol import CLOSE_FORBIDDEN, CLOSE_UNAUTHORIZED
from agents.protocol.metrics import ENTITY_KEYS, SAMPLE_KINDS
from agents.protocol.validate import ProtocolError, validate_batch

ENROLL_TOKEN = "fwe_stub_enrolment_token"

SMALL_SITE: dict[str, Any] = {
    "site": {"slug": "lab", "name": "Lab"},
    "racks": [
        {
            "name": "A01",
            "hall": "H1",
            "cooling": "direct_liquid",
            "budget_kw": 60.0,
            "loop": "CDU-1",
            "feeds": [{"name": "A", "available_kw": 40.0}, {"name": "B", "available_kw": 40.0}],
        },
        {
            "name": "B01",
            "hall": "H1",
            "cooling": "air",
            "budget_kw": 30.0,
            "loop": None,
            "feeds": [{"name": "A", "available_kw": 22.0}],
        },
    ],
    "loops": [{"name": "CDU-1", "capacity_kw": 300.0, "supply_limit_c": 34.0}],
    "nodes": [
        {
            "name": "gpu-a01-01",
            "rack": "A01",
            "gpus": [{"index": i, "model": "NVIDIA H200"} for i in range(8)],
        },
        {
            "name": "gpu-a01-02",
            "rack": "A01",
            "gpus": [{"index": i, "model": "NVIDIA H200"} for i in range(8)],
        },
        {
            "name": "gpu-b01-01",
            "rack": "B01",
            "gpus": [{"index": i, "model": "NVIDIA H200"} for i in range(4)],
        },
    ],
}


@dataclass
class Store:
    samples: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)
    deliveries: Counter[tuple[Any, ...]] = field(default_factory=Counter)
    batches: list[dict[str, Any]] = field(default_factory=list)
    seqs: Counter[tuple[str, int]] = field(default_factory=Counter)

    def keep(self, obj: dict[str, Any]) -> None:
        source = obj["source"]
        self.batches.append(obj)
        self.seqs[(source, obj["seq"])] += 1
        for kind in SAMPLE_KINDS:
            for sample in obj.get(kind, ()):
                key = (kind, source, *[sample[k] for k in ENTITY_KEYS[kind]], sample["ts"])
                self.deliveries[key] += 1
                self.samples.setdefault(key, sample)

    def count(self, kind: str, source: str | None = None) -> int:
        return sum(1 for k in self.samples if k[0] == kind and (source is None or k[1] == source))


class StubBackend:
    def __init__(self, site: dict[str, Any] | None = None) -> None:
        self.site = site or SMALL_SITE
        self.store = Store()
        self.tokens: dict[str, str] = {}  # token -> source
        self.enrolments: Counter[str] = Counter()
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.websocket_enabled = True
        self.drop_acks = 0  # swallow this many acks (the batch is stored: a lost ack)
        self.nack_next = 0
        self.clock_skew_s: float | None = None  # None: answers carry no "t" (an older server)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        config = uvicorn.Config(
            self,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="off",
            ws="websockets-sansio",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("stub backend did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        self._server = None

    def enroll(self, source: str) -> str:
        self.enrolments[source] += 1
        token = "fwn_" + secrets.token_hex(16)
        self.tokens = {t: s for t, s in self.tokens.items() if s != source}
        self.tokens[token] = source
        return token

    # -- ASGI ----------------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _http(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        bearer = _bearer(scope)
        path, method = scope["path"], scope["method"]
        if path == "/api/v1/enroll" and method == "POST":
            request = json.loads(body or b"{}")
            if request.get("enroll_token") != ENROLL_TOKEN:
                return await _reply(send, 401, {"error": {"reason": "enrolment token refused"}})
            source = request.get("source", "")
            if source not in self._known_sources():
                return await _reply(send, 404, {"error": {"reason": f"{source} not in inventory"}})
            return await _reply(send, 201, {"source": source, "token": self.enroll(source)})
        if path == "/api/v1/inventory" and method == "GET":
            if bearer != ENROLL_TOKEN:
                return await _reply(send, 401, {"error": {"reason": "bad token"}})
            return await _reply(send, 200, self.site)
        if path == "/api/v1/ingest" and method == "POST":
            source = self.tokens.get(bearer or "")
            if source is None:
                return await _reply(send, 401, {"error": {"reason": "unknown token"}})
            code, answer = self._ingest(source, body)
            return await _reply(send, code, answer)
        await _reply(send, 404, {"error": {"reason": "no such endpoint"}})

    async def _websocket(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()  # websocket.connect
        if scope["path"] != "/ws/ingest/v1" or not self.websocket_enabled:
            await send({"type": "websocket.close", "code": 1008})  # handshake refused (403)
            return
        token = _bearer(scope) or ""
        source = self.tokens.get(token)
        await send({"type": "websocket.accept"})
        if source is None:
            await send({"type": "websocket.close", "code": CLOSE_UNAUTHORIZED})
            return
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            if token not in self.tokens:  # revoked while connected
                await send({"type": "websocket.close", "code": CLOSE_UNAUTHORIZED})
                return
            text = message.get("text") or (message.get("bytes") or b"").decode()
            code, answer = self._ingest(source, text.encode())
            if code == 403:
                await send({"type": "websocket.close", "code": CLOSE_FORBIDDEN})
                return
            if code == 200 and self.drop_acks > 0:
                self.drop_acks -= 1
                continue
            frame = answer if code == 200 else {"nack": _seq_of(text), **answer}
            await send({"type": "websocket.send", "text": json.dumps(frame)})

    def _ingest(self, source: str, body: bytes) -> tuple[int, dict[str, Any]]:
        code, answer = self._judge(source, body)
        if self.clock_skew_s is not None:
            answer["t"] = round(self.server_time(), 3)
        return code, answer

    def server_time(self) -> float:
        return time.time() + (self.clock_skew_s or 0.0)

    def _judge(self, source: str, body: bytes) -> tuple[int, dict[str, Any]]:
        try:
            obj = json.loads(body)
            batch = validate_batch(obj, self.server_time())
        except ValueError:
            return 400, {"error": {"code": 400, "field": "$", "reason": "not JSON"}}
        except ProtocolError as exc:
            return exc.code, {"error": exc.as_dict()}
        if batch.source != source:
            return 403, {"error": {"code": 403, "field": "source", "reason": "another source"}}
        if self.nack_next > 0:
            self.nack_next -= 1
            return 400, {"error": {"code": 400, "field": "$", "reason": "refused by test"}}
        self.store.keep(obj)
        return 200, {"ack": batch.seq}

    def _known_sources(self) -> set[str]:
        nodes = {f"node:{n['name']}" for n in self.site["nodes"]}
        return nodes | {f"site:{self.site['site']['slug']}"}


def _seq_of(text: str) -> int | None:
    try:
        seq = json.loads(text).get("seq")
    except (ValueError, AttributeError):
        return None
    return seq if isinstance(seq, int) else None


def _bearer(scope: dict[str, Any]) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization" and value.startswith(b"Bearer "):
            return str(value[7:].decode())
    return None


async def _reply(send: Any, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_for(predicate: Any, timeout_s: float = 10.0, step_s: float = 0.02) -> bool:
    """Poll `predicate` until true; the answer, not the time, is what a test asserts."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(step_s)
    return bool(predicate())
