"""Rollup rows of a known shape for the forecast tests of pages and rules: the 1-minute
means a ramp (or a flat line) leaves in the default database, the recent window the
forecast fits (fleet/read/forecast.py PARAMS.recent_s) up to a given time."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import pytest
from django.db import connection, transaction

from fleet.read import forecast_now
from fleet.read.forecast import PARAMS

MINUTE = 60


def seed_minutes(
    table: str,
    key: str,
    entity_id: int,
    column: str,
    shape: Callable[[float], float],
    until: float,
) -> None:
    """One row per whole minute of the recent window before `until` (each the shape's
    value at its bucket's centre), as the 1-minute rollup writes them."""
    end = int(until) - int(until) % MINUTE
    start = end - int(PARAMS.recent_s)
    rows = [(entity_id, b, 6, shape(b + MINUTE / 2)) for b in range(start, end, MINUTE)]
    with transaction.atomic(), connection.cursor() as cur:
        cur.executemany(
            f"INSERT INTO {table} ({key}, bucket, n, {column}) VALUES (%s, %s, %s, %s)", rows
        )


def seed_gpu_minutes(
    node_id: int, index: int, shape: Callable[[float], float], until: float
) -> None:
    """A GPU's `temp_gpu_c_mean`, one row per whole minute of the recent window before
    `until`, as `seed_minutes` writes an entity's."""
    end = int(until) - int(until) % MINUTE
    start = end - int(PARAMS.recent_s)
    rows = [(node_id, index, b, 6, shape(b + MINUTE / 2)) for b in range(start, end, MINUTE)]
    with transaction.atomic(), connection.cursor() as cur:
        cur.executemany(
            "INSERT INTO fw_gpu_1m (node_id, gpu, bucket, n, temp_gpu_c_mean)"
            " VALUES (%s, %s, %s, %s, %s)",
            rows,
        )


def metered(shape: Callable[[float], float], sd: float, seed: int = 0) -> Callable[[float], float]:
    """`shape` as a meter reads it: plus seeded noise of standard deviation `sd`. A ramp
    without any is exact but for rounding, and the rounding error of a straight line is
    smooth: it reads as a slow wander (fleet/read/forecast.py, n_eff) and the forecast
    rightly declines it, at times, depending on the values."""
    rng = random.Random(seed)
    return lambda t: shape(t) + rng.gauss(0, sd)


@pytest.fixture(autouse=True)
def fresh_forecasts() -> Iterator[None]:
    """No stored forecasts before or after the test: another test's minute must not answer
    for this one's rows (the store outlives a test: a file or Redis cache). Autouse where a
    module names it: `fresh_forecasts = forecast_rows.fresh_forecasts`."""
    forecast_now.clear()
    yield
    forecast_now.clear()
