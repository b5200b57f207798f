"""One source's way out: assemble a batch from a reading, spool it, wake the uplink.

The real agent has one `Outbox`; the simulator has one per virtual node plus one for the
site. Both go through exactly this code, so the simulator exercises the spool and the uplink
the way a fleet of real agents would.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from agents.clock import ClockOffset
from agents.collectors.base import Reading
from agents.log import get_logger
from agents.protocol import MAX_BATCH_BYTES, PROTOCOL_VERSION
from agents.spool import Spool, SpoolSettings
from agents.uplink import Uplink, UplinkRejected, UplinkSettings

log = get_logger("agents.outbox")


def build_batch(
    source: str,
    seq: int,
    reading: Reading,
    agent: dict[str, Any],
    sent_at: float | None = None,
    cadence: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The protocol-v1 batch for one reading: empty parts are left out, not sent empty.

    `sent_at` is when the batch was built and spooled (informational: a spooled batch may
    go out much later; the server measures the clock offset from its acks instead).
    `cadence` is the source's declared intervals (`agents.protocol.cadence`), in every
    batch: the server judges the source's silence by it.
    """
    batch: dict[str, Any] = {
        "protocol": PROTOCOL_VERSION,
        "source": source,
        "seq": seq,
        "sent_at": round(time.time() if sent_at is None else sent_at, 3),
    }
    if cadence is not None:
        batch["cadence"] = cadence
    for kind, samples in reading.samples.items():
        if samples:
            batch[kind] = samples
    if reading.gpu_info:
        batch["gpu_info"] = reading.gpu_info
    if reading.node_info:
        batch["node_info"] = reading.node_info
    if reading.events:
        batch["events"] = reading.events
    if reading.workloads:
        batch["workloads"] = reading.workloads
    if reading.fabric:
        batch["fabric"] = reading.fabric
    batch["agent"] = agent
    return batch


class Outbox:
    def __init__(
        self,
        source: str,
        spool_dir: Path,
        uplink_settings: UplinkSettings,
        spool_settings: SpoolSettings | None = None,
        clock: Callable[[], float] = time.time,
        cadence: dict[str, float] | None = None,
    ) -> None:
        self.source = source
        self.cadence = cadence  # declared in every batch (docs/protocol.md, `cadence`)
        self.spool = Spool(spool_dir, spool_settings)
        self._uplink_settings = uplink_settings
        self._clock = clock  # stamps `sent_at`: the agent's AgentClock.now, in the agent
        # Kept here, not in the uplink, so the measurement survives a paused link.
        self.clock_offset = ClockOffset()
        self.uplink = Uplink(uplink_settings, self.spool, self.clock_offset)
        self.ticks_skipped = 0
        self._last_size = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run_uplink(), name=f"uplink {self.source}")

    def submit(self, reading: Reading) -> int:
        """Spool one batch (durably) and hand it to the uplink; return its seq."""
        seq = self.spool.next_seq()
        self.spool.make_room(self._last_size)
        agent = {
            "spool_batches": len(self.spool),
            "dropped_batches": self.spool.dropped_batches,
            "ticks_skipped": self.ticks_skipped,
            **self.clock_offset.report(),  # clock_offset_s, clock_rtt_s once measured
        }
        payload = orjson.dumps(
            build_batch(self.source, seq, reading, agent, self._clock(), self.cadence)
        )
        if len(payload) > MAX_BATCH_BYTES:
            # The server would refuse it (413) and resending cannot help: say so, keep going.
            log.error("batch over 1 MiB not sent", source=self.source, seq=seq, size=len(payload))
            return seq
        self._last_size = len(payload)
        try:
            self.spool.put(seq, payload)
        except OSError as exc:
            # Disk full or read-only: this batch is lost, and says so in the next that fits.
            self.spool.dropped_batches += 1
            log.error("cannot write the spool: batch lost", source=self.source, error=str(exc))
            return seq
        self.uplink.notify()
        return seq

    async def pause_uplink(self) -> None:
        """Cut the link (a network partition): batches keep going to the spool."""
        self.uplink.stop()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def resume_uplink(self) -> None:
        """Reconnect after `pause_uplink`; the spool drains oldest first."""
        if self._task is None:
            self.uplink = Uplink(self._uplink_settings, self.spool, self.clock_offset)
            self.start()

    @property
    def rejected(self) -> str | None:
        return self.uplink.rejected

    async def close(self, flush_timeout_s: float) -> bool:
        """Try to deliver what is spooled, then stop; whatever is left waits on disk."""
        delivered = True
        if self._task is not None and not self._task.done():
            delivered = await self.uplink.flush(flush_timeout_s)
        self.uplink.stop()
        if self._task is not None:
            with contextlib.suppress(UplinkRejected):
                await self._task
        return delivered

    async def _run_uplink(self) -> None:
        with contextlib.suppress(UplinkRejected):  # logged by the uplink; `rejected` says why
            await self.uplink.run()
