"""Minimal protocol clients for backend tests (the real agent has its own tests)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from websockets.sync.client import connect

from tests.support.server import FleetServer


def post_json(url: str, body: Any, token: str | None = None) -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def enroll(server: FleetServer, source: str) -> str:
    status, body = post_json(
        server.url + "/api/v1/enroll", {"enroll_token": server.enroll_token, "source": source}
    )
    assert status == 201, body
    return str(body["token"])


def gpu_batch(
    node: str, seq: int, ts: float | None = None, gpus: int = 8, **fields: Any
) -> dict[str, Any]:
    ts = time.time() if ts is None else ts
    values = {"util_gpu_pct": 50, "temp_gpu_c": 60, "power_w": 400.5, **fields}
    return {
        "protocol": 1,
        "source": f"node:{node}",
        "seq": seq,
        "gpu": [{"ts": ts, "gpu": i, **values} for i in range(gpus)],
    }


def ws_connect(server: FleetServer, token: str):  # type: ignore[no-untyped-def]
    """The agent's ingest WebSocket, authenticated with `token`."""
    return connect(
        server.ws_url + "/ws/ingest/v1",
        additional_headers={"Authorization": f"Bearer {token}"},
        open_timeout=10,
    )


async def start_agent(
    *args: str, log_level: str = "warning", stderr: int = asyncio.subprocess.PIPE
) -> asyncio.subprocess.Process:
    """`fleet-agent ARGS` from this checkout in a process of its own, stdout piped (stderr
    piped too, or `asyncio.subprocess.STDOUT` to merge it)."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "agents.cli", "--log-level", log_level, *args),
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
    )
