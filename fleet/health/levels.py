"""Levels, readings, and the judging helpers every figure uses."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from fleet.health import thresholds


class Level(enum.StrEnum):
    """A judgement, serialised as its value. Severity: ok < unknown < warn < crit."""

    OK = "ok"
    UNKNOWN = "unknown"
    WARN = "warn"
    CRIT = "crit"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Level.OK: 0, Level.UNKNOWN: 1, Level.WARN: 2, Level.CRIT: 3}


def worst(*levels: Level) -> Level:
    """The most severe level; with nothing to judge, unknown (nothing is not "ok")."""
    return max(levels, key=_RANK.__getitem__, default=Level.UNKNOWN)


@dataclass(frozen=True, slots=True)
class Reading:
    """The latest value of each metric of one entity and when it was sampled."""

    values: Mapping[str, float | int]  # absent = unsupported or never seen
    ts: Mapping[str, float]  # metric name -> Unix time that value was sampled
    newest: float | None = None  # max of `ts` when the reader already knows it

    def age_s(self, name: str, now: float) -> float | None:
        """Seconds since `name` was sampled (a clock running ahead counts as now)."""
        if name not in self.values or (t := self.ts.get(name)) is None:
            return None
        return max(0.0, now - t)

    def fresh(self, name: str, now: float, stale_after_s: float) -> float | int | None:
        """The value of `name`, or None when it is missing or older than `stale_after_s`
        (a clock running ahead counts as now). Inlined: the alert engine calls it for
        every metric of every entity each pass."""
        t = self.ts.get(name)
        if t is None or now - t >= stale_after_s:
            return None
        return self.values.get(name)


EMPTY = Reading({}, {})


@dataclass(frozen=True, slots=True)
class GpuLimits:
    """A GPU's own limits from `gpu_info` (docs/protocol.md); any may be unknown."""

    slowdown_c: float | None = None
    shutdown_c: float | None = None
    gpu_max_c: float | None = None
    mem_max_c: float | None = None
    tlimit_slowdown_c: float | None = None  # T.Limit offsets from max-operating
    tlimit_shutdown_c: float | None = None
    tlimit_gpu_max_c: float | None = None
    tlimit_mem_max_c: float | None = None
    power_limit_max_w: float | None = None


def newest_ts(reading: Reading) -> float | None:
    """When the newest value of `reading` was sampled, None when it holds nothing."""
    if reading.newest is not None:
        return reading.newest
    return max((t for n, t in reading.ts.items() if n in reading.values), default=None)


def stale(reading: Reading, now: float, stale_after_s: float = thresholds.STALE_AFTER_S) -> bool:
    """True when nothing in `reading` was sampled within `stale_after_s` (or it is empty)."""
    ts = newest_ts(reading)
    return ts is None or max(0.0, now - ts) >= stale_after_s


def _rising(value: float | None, warn: float, crit: float, strict: bool = False) -> Level:
    """Higher is worse: crit at `crit`, warn at `warn` (above them when `strict`)."""
    if value is None:
        return Level.UNKNOWN
    if value > crit or (not strict and value == crit):
        return Level.CRIT
    return Level.WARN if value > warn or (not strict and value == warn) else Level.OK


def headroom_level(headroom_c: float | None) -> Level:
    """Level of a headroom to a GPU's own limit: ≤ 3 °C crit, ≤ 10 °C warn."""
    return _rising(
        None if headroom_c is None else -headroom_c,
        -thresholds.HEADROOM_WARN_C,
        -thresholds.HEADROOM_CRIT_C,
    )


def throttling_level(thermal: int) -> Level:
    """GPUs slowed to protect themselves from heat (HW/SW thermal slowdown) are critical;
    GPUs held at their power limit are how busy GPUs run: counted, no warning by itself."""
    return Level.CRIT if thermal > 0 else Level.OK


def inlet_level(temp_c: float | None) -> Level:
    """Inlet air: above ASHRAE's recommended 27 °C warn, above A1's allowable 32 °C crit."""
    return _rising(
        temp_c, thresholds.INLET_RECOMMENDED_MAX_C, thresholds.INLET_ALLOWABLE_A1_MAX_C, strict=True
    )


def leak_level(leak: float | None) -> Level:
    """A leak detector's state: 1 warn, 2 crit (unknown when not reported)."""
    return _rising(leak, thresholds.LEAK_WARN, thresholds.LEAK_CRIT)
