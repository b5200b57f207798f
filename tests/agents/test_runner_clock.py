"""The agent's tick loop on a wall clock that steps: timestamps stay unique and it says so."""

from __future__ import annotations

import asyncio
import time
from itertools import pairwise
from pathlib import Path

from agents.clock import AgentClock
from agents.collectors.base import Reading
from agents.runconfig import AgentConfig
from agents.runner import AgentRunner, CollectorSet, build_outbox
from tests.support.stub_server import StubBackend, wait_for

SOURCE = "node:gpu-a01-01"
INTERVAL_S = 0.05


class CpuCollector:
    name = "cpu"
    interval_s = INTERVAL_S

    def setup(self) -> None:
        pass

    def collect(self, now: float) -> Reading:
        reading = Reading()
        reading.add("node", {"ts": now, "cpu_pct": 5.0})
        return reading

    def close(self) -> None:
        pass


class StepWall:
    """The real wall clock plus an offset the test can step."""

    def __init__(self) -> None:
        self.offset_s = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset_s


def _node_times(backend: StubBackend) -> list[float]:
    batches = sorted(backend.store.batches, key=lambda b: b["seq"])
    return [sample["ts"] for batch in batches for sample in batch.get("node", ())]


def _notes(backend: StubBackend) -> list[str]:
    events = [e for b in backend.store.batches for e in b.get("events", ())]
    return [e["detail"] for e in events if e["kind"] == "note"]


async def test_a_stepped_back_wall_clock_gives_a_note_and_no_repeated_timestamps(
    backend: StubBackend, tmp_path: Path
) -> None:
    config = AgentConfig(
        server=backend.url,
        source=SOURCE,
        interval_s=INTERVAL_S,
        spool_dir=tmp_path / "spool",
        backoff_cap_s=0.2,
        flush_timeout_s=5.0,
    )
    wall = StepWall()
    clock = AgentClock(wall=wall)
    outbox = build_outbox(config, backend.enroll(SOURCE), clock)
    runner = AgentRunner(config, CollectorSet([CpuCollector()], INTERVAL_S), outbox, clock)
    running = asyncio.create_task(runner.run())
    assert await wait_for(lambda: len(backend.store.batches) >= 10)
    wall.offset_s = -30.0  # NTP steps the wall clock back 30 s
    stepped_at = len(backend.store.batches)
    assert await wait_for(lambda: len(backend.store.batches) >= stepped_at + 20)
    runner.stop()
    assert await running == 0

    times = _node_times(backend)
    assert len(times) == runner.ticks
    assert all(later > earlier for earlier, later in pairwise(times))
    # Stored once each: none was dropped as a resend of an earlier sample.
    assert backend.store.count("node", SOURCE) == len(times)
    assert all(n == 1 for n in backend.store.deliveries.values())
    assert _notes(backend) == ["wall clock stepped back 30.0 s; timestamps slewed"]
    assert clock.ahead_s > 25  # still slewing: 30 s take 300 s to absorb
    # Each batch says when it was built, by the same clock: after its samples' tick.
    assert all(b["sent_at"] >= b["node"][0]["ts"] for b in backend.store.batches if "node" in b)


async def test_an_agent_without_a_step_sends_no_note(backend: StubBackend, tmp_path: Path) -> None:
    config = AgentConfig(
        server=backend.url, source=SOURCE, interval_s=INTERVAL_S, spool_dir=tmp_path / "spool"
    )
    clock = AgentClock()
    outbox = build_outbox(config, backend.enroll(SOURCE), clock)
    runner = AgentRunner(config, CollectorSet([CpuCollector()], INTERVAL_S), outbox, clock)
    running = asyncio.create_task(runner.run())
    assert await wait_for(lambda: len(backend.store.batches) >= 5)
    runner.stop()
    assert await running == 0
    assert _notes(backend) == []
    wall_now = time.time()
    assert all(abs(t - wall_now) < 60 for t in _node_times(backend))
