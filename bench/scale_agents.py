"""Agent loop for bench/scale.py: every node on its own ingest WebSocket (through the
proxy), one batch per node per second (8 GPU samples and the node's own sample), each
node at its own fixed phase within the second, as a fleet of independently started
agents would be (bench/freshness_agents.py sends every node at the same instant instead).
The connections are bench/scale_wire.py's lean client, so the load generator takes as
little CPU from the servers as it can; a lost connection is reopened a second later.

    python -m bench.scale_agents --url ws://…/ws/ingest/v1 --creds creds.json \
        --window-start EPOCH --window-end EPOCH --out result.json

Sends from now until --window-end; only batches sent inside [--window-start,
--window-end) count. Writes one JSON object to --out: send-to-ack latency percentiles
(perf_counter, per batch), the longest stretch with no ack at all fleet-wide (wall clock
between consecutive acks, any agent) and when it began, nacks, a per-second timeline
(acks, worst and p99 latency) for lining up with the worker's log, and how late the
sender itself was (a starved load generator shows up there, not as server latency).
A 503 is counted, not resent (the real agent would resend it), and so are batches left
unacknowledged on a connection that went (the agent would resend them from its spool).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import resource
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, urlsplit

import orjson

from bench.environment import install_uvloop
from bench.scale_wire import WireClient, connect

GPUS_PER_NODE = 8
# The fields a busy H200's fast lane carries every second (bench/rules.py's sample; the
# history preload writes the same columns, so history rows are as wide as live ones).
GPU_FIELDS: dict[str, float | int] = {
    "util_gpu_pct": 97.0,
    "util_mem_pct": 40.0,
    "mem_used_mib": 120_000.0,
    "mem_total_mib": 143_771.0,
    "temp_gpu_c": 61.0,
    "temp_mem_c": 70.0,
    "temp_margin_c": 25.0,
    "power_w": 650.0,
    "power_instant_w": 662.0,
    "power_limit_w": 700.0,
    "clock_sm_mhz": 1980.0,
    "clock_mem_mhz": 2619.0,
    "pstate": 0,
    "clock_event_reasons": 4,
    "ecc_sbe_vol_total": 0,
    "ecc_dbe_vol_total": 0,
    "remap_pending": 0,
    "remap_failure": 0,
    "nvlink_up": 18,
    "pcie_tx_kib_s": 100.0,
    "pcie_rx_kib_s": 100.0,
}
NODE_FIELDS: dict[str, float] = {
    "cpu_pct": 35.0,
    "load1": 24.0,
    "mem_used_mib": 900_000.0,
    "mem_total_mib": 2_000_000.0,
    "temp_cpu_c": 55.0,
    "temp_inlet_c": 24.0,
    "temp_outlet_c": 36.0,
    "power_w": 6_500.0,
    "net_rx_bytes_s": 1e9,
    "net_tx_bytes_s": 1e9,
}
GOLDEN = (math.sqrt(5) - 1) / 2  # spreads node phases evenly over the second
CONNECT_AT_ONCE = 50


WOBBLE_STEPS = 7
TS_MARK = b'"ts":0.0'


def batch(source: str, seq: int, ts: float, tick: int) -> bytes:
    wobble = float(tick % WOBBLE_STEPS)  # values move a little, as real ones do
    gpu = {**GPU_FIELDS, "temp_gpu_c": 58.0 + wobble, "power_w": 640.0 + wobble}
    gpus = [{"ts": ts, "gpu": g, **gpu} for g in range(GPUS_PER_NODE)]
    node = [{"ts": ts, **NODE_FIELDS}]
    return orjson.dumps({"protocol": 1, "source": source, "seq": seq, "gpu": gpus, "node": node})


class Batches:
    """The same bytes as `batch`, cheaper: the body is rendered once per wobble step with
    a marked `ts`, and each send splices in its source, seq and time (the load generator
    shares the cores with what it measures)."""

    def __init__(self) -> None:
        self.parts = [
            batch("", 0, 0.0, step).split(b',"gpu":', 1)[1].split(TS_MARK)
            for step in range(WOBBLE_STEPS)
        ]

    def render(self, source: str, seq: int, ts: float, tick: int) -> bytes:
        head = b'{"protocol":1,"source":"%s","seq":%d,"gpu":' % (source.encode(), seq)
        stamp = b'"ts":' + repr(ts).encode()
        return head + stamp.join(self.parts[tick % WOBBLE_STEPS])


BATCHES = Batches()


@dataclass
class Record:
    window_start: float
    window_end: float
    sent: int = 0  # batches sent inside the window
    acked: int = 0
    nacks: dict[str, int] = field(default_factory=dict)
    nack_samples: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    ack_walls: list[float] = field(default_factory=list)  # every ack in the window, wall clock
    lateness: list[float] = field(default_factory=list)  # send time − scheduled time
    per_second: dict[int, list[float]] = field(default_factory=dict)
    closed: int = 0  # connections lost (then reopened, as the agent does)
    lost: int = 0  # batches sent in the window, unacknowledged when their connection went
    skipped: int = 0  # ticks in the window with no connection to send on

    def ack(self, wall: float, latency: float | None) -> None:
        if not self.window_start <= wall < self.window_end + 5.0:
            return
        self.ack_walls.append(wall)
        if latency is not None:
            self.acked += 1
            self.latencies.append(latency)
            self.per_second.setdefault(int(wall), []).append(latency)

    def nack(self, reply: dict[str, Any]) -> None:
        error = reply.get("error")
        code = str(error.get("code", "?") if isinstance(error, dict) else "?")
        self.nacks[code] = self.nacks.get(code, 0) + 1
        if len(self.nack_samples) < 10:
            self.nack_samples.append(str(reply)[:200])


class Agent:
    """One node's connection, its sequence numbers and its batches awaiting an ack."""

    def __init__(self, cred: dict[str, str], phase: float, rec: Record) -> None:
        self.cred, self.phase, self.rec = cred, phase, rec
        self.client: WireClient | None = None
        self.reconnecting = False
        self.reconnector: asyncio.Future[None] | None = None
        self.seq = 0
        self.sent_at: dict[int, tuple[float, bool]] = {}  # seq -> (perf_counter, in window)

    def on_message(self, message: bytes) -> None:
        reply = orjson.loads(message)
        now_wall, now = time.time(), time.perf_counter()
        seq = reply.get("ack")
        if seq is None:
            self.sent_at.pop(int(reply.get("nack") or -1), None)
            if self.rec.window_start <= now_wall < self.rec.window_end + 5.0:
                self.rec.nack(reply)
            return
        started = self.sent_at.pop(int(seq), None)
        if started is not None:
            self.rec.ack(now_wall, now - started[0] if started[1] else None)

    async def connect(self, url: SplitResult) -> None:
        self.client = await connect(
            url.hostname or "127.0.0.1",
            url.port or 80,
            url.path,
            self.cred["token"],
            self.on_message,
        )

    async def reconnect(self, url: SplitResult) -> None:
        """As the agent does after a lost connection: try again every second."""
        self.reconnecting = True
        self.rec.closed += 1
        self.rec.lost += sum(1 for _, inside in self.sent_at.values() if inside)
        self.sent_at.clear()
        try:
            while time.time() < self.rec.window_end:
                try:
                    await self.connect(url)
                    return
                except (OSError, ConnectionError, TimeoutError):
                    await asyncio.sleep(1.0)
        finally:
            self.reconnecting = False

    def send(self, ts: float, tick: int, url: SplitResult) -> bool:
        client = self.client
        if client is None or client.closed:
            if not self.reconnecting:
                self.reconnector = asyncio.ensure_future(self.reconnect(url))
            return False
        self.seq += 1
        inside = self.rec.window_start <= ts < self.rec.window_end
        self.sent_at[self.seq] = (time.perf_counter(), inside)
        body = BATCHES.render(self.cred["source"], self.seq, ts, tick)
        return client.send_text(body) and inside


async def drive(agents: list[Agent], rec: Record, url: SplitResult) -> None:
    """Every agent once a second at its own phase; several due within a couple of
    milliseconds go together (one timer per slot, not one per agent)."""
    order = sorted(agents, key=lambda a: a.phase)
    t0 = math.ceil(time.time()) + 1.0
    tick = 0
    while t0 + tick < rec.window_end:
        for agent in order:
            due = t0 + tick + agent.phase
            if due >= rec.window_end:
                break
            delay = due - time.time()
            if delay > 0.002:
                await asyncio.sleep(delay)
            ts = time.time()
            if agent.send(ts, tick, url):
                rec.sent += 1
                rec.lateness.append(max(0.0, ts - due))
            elif rec.window_start <= ts < rec.window_end:
                rec.skipped += 1
        tick += 1


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def summary(rec: Record, nodes: int) -> dict[str, Any]:
    walls = sorted(rec.ack_walls)
    gap, gap_at = 0.0, rec.window_start
    previous = rec.window_start  # a silent start of the window counts too
    for wall in walls:
        if wall - previous > gap:
            gap, gap_at = wall - previous, previous
        previous = wall
    if rec.window_end - previous > gap:  # … and a silent end
        gap, gap_at = rec.window_end - previous, previous
    lat = sorted(rec.latencies)
    timeline = [
        [second, len(v), max(v), percentile(v, 99)] for second, v in sorted(rec.per_second.items())
    ]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "nodes": nodes,
        "sent": rec.sent,
        "acked": rec.acked,
        "unacked": rec.sent - rec.acked - sum(rec.nacks.values()) - rec.lost,
        "nacks": rec.nacks,
        "nack_samples": rec.nack_samples,
        "closed": rec.closed,
        "lost": rec.lost,
        "skipped": rec.skipped,
        "ack_p50_s": percentile(lat, 50),
        "ack_p90_s": percentile(lat, 90),
        "ack_p99_s": percentile(lat, 99),
        "ack_p999_s": percentile(lat, 99.9),
        "ack_max_s": lat[-1] if lat else None,
        "max_ack_gap_s": gap,
        "max_ack_gap_at": gap_at,
        "send_late_p99_s": percentile(rec.lateness, 99),
        "send_late_max_s": max(rec.lateness, default=None),
        "client_cpu_s": usage.ru_utime + usage.ru_stime,
        "timeline": timeline,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    install_uvloop()
    with open(args.creds) as f:
        creds: list[dict[str, str]] = json.load(f)
    rec = Record(args.window_start, args.window_end)
    url = urlsplit(args.url)
    agents = [Agent(c, (i * GOLDEN) % 1.0, rec) for i, c in enumerate(creds)]
    gate = asyncio.Semaphore(CONNECT_AT_ONCE)

    async def first_connect(agent: Agent) -> None:
        async with gate:
            await agent.connect(url)

    await asyncio.gather(*(first_connect(a) for a in agents))
    await drive(agents, rec, url)
    await asyncio.sleep(5.0)  # the last acks
    for agent in agents:
        if agent.client is not None:
            agent.client.close()
    return summary(rec, len(creds))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--creds", required=True)
    parser.add_argument("--window-start", type=float, required=True)
    parser.add_argument("--window-end", type=float, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    result = asyncio.run(run(args))
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
