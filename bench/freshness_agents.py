"""Agent loop for bench/freshness.py: every node of the demo fleet on its own ingest
WebSocket, one batch of 8 GPU samples per node per tick, all nodes sampling at the same
instant (as `fleet-agent simulate` does: one `ts` per tick for every virtual node).

    python bench/freshness_agents.py --url ws://…/ws/ingest/v1 --creds creds.json --ticks 70

The samples' power moves one step per tick (`power_w(level)`, a triangle wave), so the
rack sum the fleet page shows names the tick it comes from. Prints one JSON line: each
tick's `ts` (wall clock, taken before its batches are built) and level, and each tick's
durable ack latency (the last of its batches acknowledged).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import orjson
import websockets

GPUS_PER_NODE = 8
BASE_W, STEP_W, LEVELS = 100.0, 20.0, 30  # 100 … 700 W; one node moves 160 W a step
FIELDS = {
    "util_gpu_pct": 97.0,
    "util_mem_pct": 41.0,
    "mem_used_mib": 70123.0,
    "mem_total_mib": 143771.0,
    "temp_gpu_c": 62.0,
    "temp_mem_c": 53.0,
    "clock_sm_mhz": 1485.0,
    "clock_mem_mhz": 3201.0,
    "pstate": 0,
    "ecc_sbe_vol_total": 0,
    "ecc_dbe_vol_total": 0,
    "remap_pending": 0,
    "pcie_replay_total": 0,
}


def level(tick: int) -> int:
    """0, 1, … LEVELS, LEVELS − 1, … 1, 0, …: consecutive ticks always one step apart,
    so a rack whose nodes straddle two ticks shows a sum between two levels' sums."""
    phase = tick % (2 * LEVELS)
    return phase if phase <= LEVELS else 2 * LEVELS - phase


def power_w(lvl: int) -> float:
    return BASE_W + STEP_W * lvl


def batch(source: str, seq: int, ts: float, watts: float) -> str:
    values = {**FIELDS, "power_w": watts, "power_instant_w": watts}
    gpus = [{"ts": ts, "gpu": g, **values} for g in range(GPUS_PER_NODE)]
    return orjson.dumps({"protocol": 1, "source": source, "seq": seq, "gpu": gpus}).decode()


async def read_acks(ws: Any, acked: dict[int, float], errors: list[str]) -> None:
    async for message in ws:
        reply = orjson.loads(message)
        if "ack" in reply:
            seq = int(reply["ack"])
            acked[seq] = max(acked.get(seq, 0.0), time.time())
        else:
            errors.append(str(reply)[:200])


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with open(args.creds) as f:
        creds: list[dict[str, str]] = json.load(f)
    sockets = [
        await websockets.connect(
            args.url,
            additional_headers={"Authorization": f"Bearer {c['token']}"},
            compression=None,
        )
        for c in creds
    ]
    acked: dict[int, float] = {}  # seq (= tick + 1) -> when its last batch was acked
    errors: list[str] = []
    readers = [asyncio.ensure_future(read_acks(ws, acked, errors)) for ws in sockets]
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.5
    ticks: list[dict[str, Any]] = []
    for k in range(args.ticks):
        delay = start + k * args.interval - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        ts = time.time()
        lvl = level(k)
        for c, ws in zip(creds, sockets, strict=True):
            await ws.send(batch(c["source"], k + 1, ts, power_w(lvl)))
        ticks.append({"tick": k, "ts": ts, "level": lvl, "sent_s": time.time() - ts})
    await asyncio.sleep(2.0)  # the last acks
    for ws in sockets:
        await ws.close()
    for task in readers:
        task.cancel()
    for t in ticks:
        done = acked.get(t["tick"] + 1)
        t["ack_s"] = None if done is None else done - t["ts"]
    return {"ticks": ticks, "errors": errors[:20], "nodes": len(creds)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--creds", required=True)
    parser.add_argument("--ticks", type=int, required=True)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args))))


if __name__ == "__main__":
    main()
