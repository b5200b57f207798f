"""The agent's clock: sample timestamps never run backwards; the server's offset from acks."""

from __future__ import annotations

import math
from itertools import pairwise

from agents.clock import (
    MAX_RTT_S,
    MAX_SLEW_STEP_S,
    SLEW_RATE,
    AgentClock,
    ClockOffset,
)

START = 1_795_996_288.0


class SteppableTime:
    """A monotonic clock that moves when the test says, and a wall clock it can step."""

    def __init__(self) -> None:
        self.mono = 5_000.0
        self.wall_minus_mono = START - self.mono

    def wall(self) -> float:
        return self.mono + self.wall_minus_mono

    def monotonic(self) -> float:
        return self.mono

    def step_wall(self, seconds: float) -> None:
        self.wall_minus_mono += seconds


def _clock(time: SteppableTime) -> AgentClock:
    return AgentClock(wall=time.wall, monotonic=time.monotonic)


def _tick(clock: AgentClock, time: SteppableTime, seconds: float = 1.0) -> float:
    time.mono += seconds
    return clock.now()


def test_in_step_with_the_wall_clock_it_is_the_wall_clock() -> None:
    time = SteppableTime()
    clock = _clock(time)
    stamps = [_tick(clock, time) for _ in range(5)]
    assert stamps == [START + i for i in range(1, 6)]
    assert clock.take_notes() == []


def test_a_30_s_backward_step_keeps_timestamps_increasing_and_rejoins_wall_time() -> None:
    time = SteppableTime()
    clock = _clock(time)
    before = [_tick(clock, time) for _ in range(10)]
    time.step_wall(-30.0)
    after: list[tuple[float, float]] = []  # (stamp, wall)
    for _ in range(400):
        stamp = _tick(clock, time)
        after.append((stamp, time.wall()))
    stamps = before + [stamp for stamp, _ in after]
    assert all(later > earlier for earlier, later in pairwise(stamps))
    rejoined = next(i for i, (stamp, wall) in enumerate(after) if stamp == wall)
    # Documented: a step back of S seconds is absorbed within S / (1 - SLEW_RATE) seconds.
    assert rejoined <= math.ceil(30.0 / (1 - SLEW_RATE)) + 1
    assert all(stamp == wall for stamp, wall in after[rejoined:])
    assert clock.ahead_s == 0.0
    notes = clock.take_notes()
    assert [n["detail"] for n in notes] == ["wall clock stepped back 30.0 s; timestamps slewed"]
    assert notes[0]["kind"] == "note" and notes[0]["ts"] == round(after[0][0], 3)
    assert clock.take_notes() == []  # reported once


def test_while_slewing_the_clock_runs_at_the_slew_rate() -> None:
    time = SteppableTime()
    clock = _clock(time)
    last = _tick(clock, time)
    time.step_wall(-10.0)
    stamps = [_tick(clock, time) for _ in range(20)]
    assert stamps[0] == last + SLEW_RATE
    # Unix times near 1.8e9 carry about 2e-7 s of float precision.
    assert all(math.isclose(b - a, SLEW_RATE, abs_tol=1e-6) for a, b in pairwise(stamps))
    assert math.isclose(clock.ahead_s, 10.0 - 20 * (1 - SLEW_RATE), abs_tol=1e-5)


def test_a_forward_step_is_followed_at_once() -> None:
    time = SteppableTime()
    clock = _clock(time)
    _tick(clock, time)
    time.step_wall(120.0)
    assert _tick(clock, time) == time.wall()
    assert [n["detail"] for n in clock.take_notes()] == [
        "wall clock stepped forward 120.0 s; followed at once"
    ]


def test_a_forward_step_during_a_slew_shortens_it() -> None:
    time = SteppableTime()
    clock = _clock(time)
    _tick(clock, time)
    time.step_wall(-100.0)
    _tick(clock, time)
    time.step_wall(+150.0)  # back past where the timestamps are: follow the wall again
    assert _tick(clock, time) == time.wall()
    assert len(clock.take_notes()) == 2


def test_a_2_hour_backward_step_is_taken_at_once_and_noted() -> None:
    time = SteppableTime()
    clock = _clock(time)
    last = _tick(clock, time)
    time.step_wall(-7200.0)
    stamp = _tick(clock, time)
    assert stamp == time.wall() and stamp < last  # slewing 2 h would take 20 h
    notes = clock.take_notes()
    assert len(notes) == 1
    assert notes[0]["detail"].startswith("wall clock stepped back 7200.0 s; followed at once")
    assert "duplicates" in notes[0]["detail"]
    assert _tick(clock, time) == time.wall()  # and it follows the wall clock from there


def test_backward_steps_that_add_up_past_the_slew_bound_are_taken_at_once() -> None:
    time = SteppableTime()
    clock = _clock(time)
    _tick(clock, time)
    time.step_wall(-0.6 * MAX_SLEW_STEP_S)
    _tick(clock, time)
    assert clock.ahead_s > 0
    time.step_wall(-0.6 * MAX_SLEW_STEP_S)
    assert _tick(clock, time) == time.wall()  # timestamps are never more than the bound off
    assert clock.ahead_s == 0.0
    assert "followed at once" in clock.take_notes()[-1]["detail"]


def test_jitter_below_a_second_is_absorbed_without_a_note() -> None:
    time = SteppableTime()
    clock = _clock(time)
    stamps = [_tick(clock, time)]
    time.step_wall(-0.3)
    stamps += [_tick(clock, time, 0.1) for _ in range(5)]
    assert all(later > earlier for earlier, later in pairwise(stamps))
    assert clock.take_notes() == []


def test_the_offset_is_the_servers_time_minus_the_midpoint_of_the_round_trip() -> None:
    offset = ClockOffset()
    sample = offset.measure(sent=1000.0, received=1000.2, server_time=1042.6)
    assert sample is not None
    assert math.isclose(sample.offset_s, 42.5) and math.isclose(sample.rtt_s, 0.2)
    assert offset.report() == {"clock_offset_s": 42.5, "clock_rtt_s": 0.2}


def test_the_offset_comes_from_the_answer_with_the_shortest_round_trip() -> None:
    offset = ClockOffset()
    offset.measure(1000.0, 1000.8, 1001.4)  # offset 1.0, but 0.8 s of queueing
    offset.measure(1001.0, 1001.02, 1002.51)  # offset 1.5, 20 ms
    offset.measure(1002.0, 1002.5, 1003.0)  # offset 0.75, 0.5 s
    assert offset.report() == {"clock_offset_s": 1.5, "clock_rtt_s": 0.02}


def test_answers_without_a_usable_time_or_too_slow_are_ignored() -> None:
    offset = ClockOffset()
    assert offset.measure(1000.0, 1000.1, None) is None  # an older server: no "t"
    assert offset.measure(1000.0, 1000.1, True) is None
    assert offset.measure(1000.0, 1000.1, "1000.05") is None
    assert offset.measure(1000.0, 1000.1, math.nan) is None
    assert offset.measure(1000.0, 1000.0 + MAX_RTT_S + 0.1, 1001.0) is None
    assert offset.measure(1000.0, 999.0, 1000.0) is None  # the wall clock stepped meanwhile
    assert offset.best() is None and offset.report() == {}
