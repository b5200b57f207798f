"""Load generator for bench/ingest.py: C WebSocket connections (one per node),
W unacknowledged batches in flight on each, closed loop. Prints one JSON line."""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import time
from typing import Any

import orjson
import websockets

from bench.environment import install_uvloop

FIELDS = {
    "util_gpu_pct": 97.0,
    "util_mem_pct": 41.0,
    "mem_used_mib": 70123.0,
    "mem_total_mib": 143771.0,
    "temp_gpu_c": 62.0,
    "temp_mem_c": 53.0,
    "temp_margin_c": 25.0,
    "power_w": 689.5,
    "power_instant_w": 702.1,
    "power_limit_w": 700.0,
    "clock_sm_mhz": 1485.0,
    "clock_mem_mhz": 3201.0,
    "pstate": 0,
    "clock_event_reasons": 4,
    "ecc_sbe_vol_total": 0,
    "ecc_dbe_vol_total": 0,
    "remapped_rows_correctable": 0,
    "remapped_rows_uncorrectable": 0,
    "remap_pending": 0,
    "pcie_replay_total": 0,
}


def batch_bytes(source: str, seq: int, ts: float) -> bytes:
    gpus = [{"ts": ts, "gpu": i, **FIELDS} for i in range(8)]
    return orjson.dumps({"protocol": 1, "source": source, "seq": seq, "gpu": gpus})


class Stats:
    def __init__(self, start: float, end: float) -> None:
        self.start, self.end = start, end
        self.in_window = 0
        self.total = 0
        self.latencies: list[float] = []
        self.errors = 0


async def one_connection(
    url: str, token: str, source: str, inflight: int, stats: Stats, stop_at: float, t0: float
) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with websockets.connect(
        url, additional_headers=headers, compression=None, max_size=None
    ) as ws:
        sent_at: dict[int, float] = {}
        seq = 0

        async def send_next() -> None:
            nonlocal seq
            seq += 1
            sent_at[seq] = time.perf_counter()
            await ws.send(batch_bytes(source, seq, t0 + seq * 0.001).decode())

        for _ in range(inflight):
            await send_next()
        while sent_at:
            reply: dict[str, Any] = orjson.loads(await ws.recv())
            acked: int = reply.get("ack", -1)
            if acked == -1:
                stats.errors += 1
                acked = reply.get("nack") or -1
            now = time.perf_counter()
            started = sent_at.pop(acked, None)
            stats.total += 1
            if stats.start <= now < stats.end:
                stats.in_window += 1
                if started is not None:
                    stats.latencies.append(now - started)
            if now < stop_at:
                await send_next()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    install_uvloop()
    with open(args.tokens) as f:
        creds = json.load(f)[: args.connections]
    begin = time.perf_counter()
    stats = Stats(begin + args.warmup, begin + args.warmup + args.window)
    stop_at = stats.end
    t0 = time.time() - 200  # ts in the recent past, unique per (node, seq)
    tasks = [
        one_connection(args.url, c["token"], c["source"], args.inflight, stats, stop_at, t0)
        for c in creds
    ]
    await asyncio.gather(*tasks)
    lat = sorted(stats.latencies)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "client_cpu_s": usage.ru_utime + usage.ru_stime,
        "acked_in_window": stats.in_window,
        "acked_total": stats.total,
        "window_s": args.window,
        "errors": stats.errors,
        "p50_ms": 1000 * statistics.median(lat) if lat else None,
        "p99_ms": 1000 * lat[int(len(lat) * 0.99)] if lat else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--tokens", required=True)
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--inflight", type=int, default=4)
    parser.add_argument("--warmup", type=float, default=3)
    parser.add_argument("--window", type=float, default=20)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args))))


if __name__ == "__main__":
    main()
