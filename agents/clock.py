"""Time on the agent: timestamps that never run backwards, and the server's clock offset.

The backend keys stored samples by (time, entity) and keeps each node's latest state
newest-wins. A wall clock that steps back (NTP correcting a clock that ran fast, someone
running `date -s`) would therefore make the agent's next samples collide with stored
ones, which the server drops as resends, and the node would look frozen until the wall
clock caught up. `AgentClock` stamps samples instead:

- it follows the wall clock while the wall clock agrees with the monotonic clock;
- a backward step of up to `MAX_SLEW_STEP_S` is slewed: the clock keeps running, at
  `SLEW_RATE` of real time, until the wall clock catches up with it (a step of S seconds
  is absorbed after S / (1 - SLEW_RATE) seconds: 10·S, at most 100 minutes). Timestamps
  keep increasing, by a little less than the real time between them;
- a larger backward step is taken at once: slewing it would keep timestamps wrong for
  hours. Samples stamped in the overlap may collide with stored ones and are then
  dropped by the server as duplicates;
- a forward step is taken at once (nothing collides going forward).

Every step is logged and handed out once, by `take_notes()`, as a `note` event for the
next batch, so the server's event log says why a node's timestamps jumped.

The clock lives in the process: an agent restarted after a backward step starts from
the wall clock. `ClockOffset` is the other half: what the server's clock says minus
ours, measured NTP-style from the server's time (`t`) in its acks (docs/protocol.md).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agents.log import get_logger

log = get_logger("agents.clock")

# The largest backward step that is slewed rather than taken at once.
MAX_SLEW_STEP_S = 600.0
# How fast the clock runs, relative to real time, while it is ahead of the wall clock.
SLEW_RATE = 0.9
# A disagreement between the wall and the monotonic clock that counts as a step. NTP slews
# by at most 0.5 ms/s, so anything this large is a step (or a suspend, which is forward).
STEP_NOTICE_S = 1.0

# An ack whose round trip took longer than this says little about the offset: ignored.
MAX_RTT_S = 2.0
# The offset is the one measured with the shortest round trip among the last few answers.
OFFSET_WINDOW = 8


class AgentClock:
    """Unix time for samples and events: follows the wall clock, never goes backwards.

    `wall` and `monotonic` are injectable so that tests can step the wall clock.
    Thread-safe: the tick loop and the collect thread may both ask.
    """

    def __init__(
        self,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._wall = wall
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._last: float | None = None  # the last time handed out
        self._last_wall = 0.0
        self._last_mono = 0.0
        self._notes: list[dict[str, Any]] = []

    def now(self) -> float:
        with self._lock:
            wall, mono = self._wall(), self._monotonic()
            if self._last is None:
                stamp = wall
            else:
                stamp = self._advance(self._last, wall, max(0.0, mono - self._last_mono))
            self._last, self._last_wall, self._last_mono = stamp, wall, mono
            return stamp

    @property
    def ahead_s(self) -> float:
        """How far the last time handed out was ahead of the wall clock (0 unless slewing)."""
        with self._lock:
            return 0.0 if self._last is None else max(0.0, self._last - self._last_wall)

    def take_notes(self) -> list[dict[str, Any]]:
        """The `note` events for the steps seen since the last call (each is handed out once)."""
        with self._lock:
            notes, self._notes = self._notes, []
            return notes

    def _advance(self, last: float, wall: float, elapsed: float) -> float:
        # What the wall clock did beyond the real time that passed: 0 unless it stepped.
        step = wall - (self._last_wall + elapsed)
        ahead = last + elapsed - wall  # how far our timeline would be ahead of the wall
        if ahead > MAX_SLEW_STEP_S:
            self._note(
                wall,
                step,
                f"wall clock stepped back {-step:.1f} s; followed at once (over "
                f"{MAX_SLEW_STEP_S:g} s to slew): samples that repeat stored timestamps are "
                "dropped by the server as duplicates",
            )
            return wall
        # Slewing (or absorbing a step too small to note): run at SLEW_RATE, never behind
        # the wall clock. In step with the wall clock this is simply the wall clock.
        stamp = max(wall, last + elapsed * SLEW_RATE)
        if step <= -STEP_NOTICE_S:
            self._note(stamp, step, f"wall clock stepped back {-step:.1f} s; timestamps slewed")
        elif step >= STEP_NOTICE_S:
            self._note(stamp, step, f"wall clock stepped forward {step:.1f} s; followed at once")
        return stamp

    def _note(self, stamp: float, step: float, detail: str) -> None:
        log.warning("wall clock stepped", step_s=round(step, 3), detail=detail)
        self._notes.append({"ts": round(stamp, 3), "kind": "note", "detail": detail})


@dataclass(frozen=True, slots=True)
class OffsetSample:
    offset_s: float  # the server's clock minus ours
    rtt_s: float


class ClockOffset:
    """The server's clock minus the agent's wall clock, from the `t` in the server's answers.

    NTP-style: with the agent's wall time at send and at receipt, the server's `t` is taken
    to be halfway through the round trip, so one measurement is off by at most rtt / 2.
    Answers with a round trip over `MAX_RTT_S` are ignored; of the last `OFFSET_WINDOW`
    the one with the shortest round trip is reported (NTP's clock filter does the same:
    queueing only ever adds delay, and delay is where the error comes from).
    """

    def __init__(self, window: int = OFFSET_WINDOW) -> None:
        self._recent: deque[OffsetSample] = deque(maxlen=window)

    def measure(self, sent: float, received: float, server_time: Any) -> OffsetSample | None:
        """Record one answer; None when it carries no usable time (an older server)."""
        if type(server_time) is not float and type(server_time) is not int:
            return None
        if not math.isfinite(server_time):
            return None
        rtt = received - sent
        if not 0.0 <= rtt <= MAX_RTT_S:
            return None
        sample = OffsetSample(offset_s=server_time - (sent + received) / 2, rtt_s=rtt)
        self._recent.append(sample)
        return sample

    def best(self) -> OffsetSample | None:
        return min(self._recent, key=lambda s: s.rtt_s, default=None)

    def report(self) -> dict[str, float]:
        """`clock_offset_s` and `clock_rtt_s` for the batch's `agent` block; {} before any."""
        best = self.best()
        if best is None:
            return {}
        return {"clock_offset_s": round(best.offset_s, 3), "clock_rtt_s": round(best.rtt_s, 3)}
