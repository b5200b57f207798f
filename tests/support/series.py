"""Simulated rollup series for the forecast tests: a known shape plus seeded noise, as
(epoch s, value) points stamped at their bucket's centre, as fleet/read/forecast.py takes
them."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

Shape = Callable[[float], float]  # the true value at a time


def sampled(
    shape: Shape,
    now: float,
    hours: float,
    *,
    step_s: float = 60.0,
    sd: float = 0.0,
    ar: float = 0.0,
    seed: int = 0,
) -> list[tuple[float, float]]:
    """`shape` at each bucket over the `hours` before `now` (the last bucket at `now`),
    plus noise of standard deviation `sd`; with `ar` the noise is AR(1) with that lag-1
    correlation (a slow wander, as a real rack's minute means have), `sd` its stationary
    spread."""
    rng = random.Random(seed)
    count = int(hours * 3600 / step_s)
    innovation = sd * math.sqrt(1 - ar * ar)
    noise = rng.gauss(0, sd) if sd else 0.0
    points = []
    for i in range(count):
        t = now - (count - 1 - i) * step_s
        noise = ar * noise + rng.gauss(0, innovation) if sd else 0.0
        points.append((t, shape(t) + noise))
    return points


def ramp(start: float, at: float, per_h: float) -> Shape:
    """`start` at time `at`, rising `per_h` an hour (falling if negative)."""
    return lambda t: start + per_h * (t - at) / 3600


def daily_wave(amplitude: float, peak_s: float = 15 * 3600) -> Shape:
    """A sine of one day, highest at `peak_s` into each UTC day (15:00 by default)."""
    return lambda t: amplitude * math.cos(2 * math.pi * (t - peak_s) / 86_400)


def first_reach(shape: Shape, limit: float, start: float, end: float, step: float = 1.0) -> float:
    """The true crossing time, walked in `step` seconds (the oracle for the tests)."""
    t = start
    while t <= end:
        if shape(t) >= limit:
            return t
        t += step
    raise AssertionError("the shape does not reach the limit")
