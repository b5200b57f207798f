"""Time to limit for a site's GPUs: each GPU's temperature (`temp_gpu_c_mean` of
`fw_gpu_<tier>`) against its slowdown limit in force (entered, else reported:
`fleet.health.limits.limit_in_force`) less `HEADROOM_CRIT_C`, the headroom at which the
`gpu-headroom-critical` rule fires (docs/forecast.md says why that one).

A site has thousands of GPUs and most hold steady, so the pass screens first: one statement
sums, per GPU, what a least-squares line over its recent minutes needs (n, Σx, Σx², Σv, Σxv,
Σv²), and only a GPU whose slope is positive with a plain t statistic of at least
`SCREEN_T`, and whose line reaches its limit within the horizon give or take
`SCREEN_MARGIN_C`, is read in full and fitted by `fleet.read.forecast.time_to_limit`. The
screen cannot drop a GPU the fit would forecast from its minutes alone: the fit's own test
is stricter (its t statistic is the plain one shrunk for autocorrelation, against a quantile
of at least 3.09), and it forecasts only where its line reaches the limit. A daily pattern
can, in principle, make a rise of minutes that are flat, or add more than the margin —
such a GPU is not forecast (docs/forecast.md, "GPU headroom").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db import connections

from fleet.health.thresholds import HEADROOM_CRIT_C
from fleet.read.forecast import PARAMS, Forecast, ForecastParams, NoForecast, time_to_limit
from fleet.storage.schema import TIER_SECONDS, rollup_table

__all__ = ("SCREEN_MARGIN_C", "SCREEN_T", "GpuForecast", "Line", "gpu_forecasts", "rising_gpus")

DAY_S = 86_400
# A plain t statistic of the slope at or above this is fitted. Below it the fit could not
# forecast from the minutes alone: its t statistic is this one shrunk for autocorrelation,
# tested against a t quantile at PARAMS.confidence (0.999) of at least 3.09.
SCREEN_T = 3.0
# GPUs per statement when reading the screened GPUs' series (SQLite's variable limit).
_CHUNK = 400
# A rising GPU is fitted only if its line, this much higher, reaches its limit within the
# horizon: the fit's projection is that line plus a daily pattern, if the GPU has one, and
# a GPU's day moves its temperature by a few degrees (the inlet air's, the jobs').
SCREEN_MARGIN_C = 5.0

GpuKey = tuple[int, int]  # (node id, GPU index)
Points = dict[GpuKey, list[tuple[float, float]]]


@dataclass(frozen=True)
class GpuForecast:
    gpu_id: int
    node_id: int
    index: int
    name: str  # "b00012 GPU 3", as the GPU rules name it
    rack: str
    limit: float  # °C
    forecast: Forecast | NoForecast


@dataclass(frozen=True)
class _Gpu:
    pk: int
    name: str
    rack: str
    limit: float


def _site_gpus(site_id: int, using: str) -> dict[GpuKey, _Gpu]:
    """The site's GPUs that have a slowdown limit in force, by (node id, index)."""
    sql = (
        'SELECT g.id, g.node_id, g."index", n.name, k.name,'
        " COALESCE(g.slowdown_c, g.reported_slowdown_c)"
        " FROM fleet_gpu g JOIN fleet_node n ON n.id = g.node_id"
        " JOIN fleet_rack k ON k.id = n.rack_id JOIN fleet_hall h ON h.id = k.hall_id"
        " WHERE h.site_id = %s AND COALESCE(g.slowdown_c, g.reported_slowdown_c) IS NOT NULL"
    )
    with connections[using].cursor() as cur:
        cur.execute(sql, [site_id])
        return {
            (int(node), int(index)): _Gpu(
                int(pk), f"{node_name} GPU {index}", rack, float(slowdown) - HEADROOM_CRIT_C
            )
            for pk, node, index, node_name, rack, slowdown in cur.fetchall()
        }


@dataclass(frozen=True)
class Line:
    """A GPU's least-squares line over its recent minutes, from the screen's sums."""

    level: float  # °C, at the `until` the screen was given
    slope_per_s: float


def rising_gpus(
    site_id: int, since: float, until: float, using: str, min_points: int
) -> dict[GpuKey, Line]:
    """The site's GPUs whose whole 1-minute buckets in [since, until) number at least
    `min_points` and rise: slope above zero, plain t statistic at least `SCREEN_T`; each
    with its line. One statement: the sums per GPU, the site's nodes a semi-join."""
    step = TIER_SECONDS["1m"]
    sql = (
        "SELECT node_id, gpu, COUNT(*), SUM(x), SUM(x * x), SUM(v), SUM(x * v), SUM(v * v)"
        " FROM (SELECT node_id, gpu, CAST(bucket - %s AS DOUBLE PRECISION) / 60 AS x,"
        f" temp_gpu_c_mean AS v FROM {rollup_table('gpu', '1m')}"
        f" WHERE bucket >= %s AND bucket + {step} <= %s AND temp_gpu_c_mean IS NOT NULL"
        " AND node_id IN (SELECT n.id FROM fleet_node n JOIN fleet_rack k ON k.id = n.rack_id"
        " JOIN fleet_hall h ON h.id = k.hall_id WHERE h.site_id = %s)) r"
        " GROUP BY node_id, gpu"
    )
    out: dict[GpuKey, Line] = {}
    # x: minutes from `since` to the bucket's centre
    x_until = (until - since) / 60
    with connections[using].cursor() as cur:
        cur.execute(sql, [int(since) - step // 2, int(since), int(until), site_id])
        for node, gpu, n, sx, sxx, sv, sxv, svv in cur.fetchall():
            if n < max(min_points, 3):
                continue
            line = _rising_line(n, sx, sxx, sv, sxv, svv, x_until)
            if line is not None:
                out[(int(node), int(gpu))] = line
    return out


def _rising_line(
    n: int, sx: float, sxx: float, sv: float, sxv: float, svv: float, x_at: float
) -> Line | None:
    """The least-squares line from the sums, if its slope is above zero at `SCREEN_T`
    (plain t); its level at `x_at`."""
    cxx = sxx - sx * sx / n
    cxy = sxv - sx * sv / n
    cyy = svv - sv * sv / n
    if cxx <= 0 or cxy <= 0:
        return None
    slope = cxy / cxx  # per minute
    sse = max(cyy - slope * cxy, 0.0)
    # sse 0: a straight rise, nothing to test it against
    if sse > 0.0 and slope / math.sqrt(sse / (n - 2) / cxx) < SCREEN_T:
        return None
    return Line(sv / n + slope * (x_at - sx / n), slope / 60)


def _temps(keys: Iterable[GpuKey], since: float, until: float, tier: str, using: str) -> Points:
    """The GPUs' temperature means per whole bucket in [since, until), at bucket centres."""
    wanted = sorted(set(keys))
    step = TIER_SECONDS[tier]
    out: Points = {}
    with connections[using].cursor() as cur:
        for i in range(0, len(wanted), _CHUNK):
            chunk = wanted[i : i + _CHUNK]
            pairs = ", ".join(["(%s, %s)"] * len(chunk))
            cur.execute(
                f"SELECT node_id, gpu, bucket, temp_gpu_c_mean FROM {rollup_table('gpu', tier)}"
                f" WHERE (node_id, gpu) IN (VALUES {pairs})"
                f" AND bucket >= %s AND bucket + {step} <= %s AND temp_gpu_c_mean IS NOT NULL"
                " ORDER BY node_id, gpu, bucket",
                [*(v for key in chunk for v in key), int(since), int(until)],
            )
            for node, gpu, bucket, value in cur.fetchall():
                key = (int(node), int(gpu))
                out.setdefault(key, []).append((int(bucket) + step / 2, float(value)))
    return out


def gpu_forecasts(
    site_id: int, now: float, using: str, params: ForecastParams = PARAMS
) -> list[GpuForecast]:
    """The site's rising GPUs (the screen's), each forecast against its limit, in (node,
    index) order; a GPU the screen passes by has no entry."""
    since = now - params.recent_s
    gpus = _site_gpus(site_id, using)
    horizon = params.horizon_fraction * params.recent_s
    lines = rising_gpus(site_id, since, now, using, params.min_points)
    keys = sorted(
        k
        for k, line in lines.items()
        if k in gpus and line.level + line.slope_per_s * horizon + SCREEN_MARGIN_C >= gpus[k].limit
    )
    if not keys:
        return []
    recent = _temps(keys, since, now, "1m", using)
    daily = _temps(keys, since - params.pattern_days * DAY_S, since, "1h", using)
    return [_forecast(k, gpus[k], recent.get(k, []), daily.get(k, []), now, params) for k in keys]


def _forecast(
    key: GpuKey,
    gpu: _Gpu,
    points: Sequence[tuple[float, float]],
    hours: Sequence[tuple[float, float]],
    now: float,
    params: ForecastParams,
) -> GpuForecast:
    forecast = time_to_limit(points, gpu.limit, now, daily=hours, params=params)
    return GpuForecast(gpu.pk, key[0], key[1], gpu.name, gpu.rack, gpu.limit, forecast)
