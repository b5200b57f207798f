"""Time to limit for a site's GPUs: each GPU's temperature (`temp_gpu_c_mean` of
`fw_gpu_<tier>`) against its slowdown limit in force (entered, else reported:
`fleet.health.limits.limit_in_force`) less `HEADROOM_CRIT_C`, the headroom at which the
`gpu-headroom-critical` rule fires (docs/forecast.md says why that one).

A site has thousands of GPUs and most hold steady, so the pass screens first: one statement
sums, per GPU, what a least-squares line over its recent minutes needs (n, Σx, Σx², Σv, Σxv,
Σv²), and only a GPU whose slope is positive with a plain t statistic of at least
`SCREEN_T` is read in full and fitted by `fleet.read.forecast.time_to_limit`. The screen
cannot drop a GPU the fit would forecast from its minutes alone: the fit's own test is
stricter (its t statistic is the plain one shrunk for autocorrelation, against a quantile
of at least 3.09). A daily pattern can, in principle, make a rise of minutes that are flat
— such a GPU is not forecast (docs/forecast.md, "GPU headroom").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db import connections

from fleet.health.thresholds import HEADROOM_CRIT_C
from fleet.read.forecast import PARAMS, Forecast, ForecastParams, NoForecast, time_to_limit
from fleet.storage.schema import TIER_SECONDS, rollup_table

__all__ = ("SCREEN_T", "GpuForecast", "gpu_forecasts", "rising_gpus")

DAY_S = 86_400
# A plain t statistic of the slope at or above this is fitted. Below it the fit could not
# forecast from the minutes alone: its t statistic is this one shrunk for autocorrelation,
# tested against a t quantile at PARAMS.confidence (0.999) of at least 3.09.
SCREEN_T = 3.0
# Node ids per statement when reading the screened GPUs' series (SQLite's variable limit).
_CHUNK = 500

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


def rising_gpus(
    site_id: int, since: float, until: float, using: str, min_points: int
) -> set[GpuKey]:
    """The site's GPUs whose whole 1-minute buckets in [since, until) number at least
    `min_points` and rise: slope above zero, plain t statistic at least `SCREEN_T`."""
    step = TIER_SECONDS["1m"]
    sql = (
        "SELECT r.node_id, r.gpu, COUNT(*), SUM(r.x), SUM(r.x * r.x), SUM(r.v),"
        " SUM(r.x * r.v), SUM(r.v * r.v) FROM"
        " (SELECT node_id, gpu, CAST(bucket - %s AS DOUBLE PRECISION) / 60 AS x,"
        f" temp_gpu_c_mean AS v FROM {rollup_table('gpu', '1m')}"
        f" WHERE bucket >= %s AND bucket + {step} <= %s AND temp_gpu_c_mean IS NOT NULL) r"
        " JOIN fleet_node n ON n.id = r.node_id JOIN fleet_rack k ON k.id = n.rack_id"
        " JOIN fleet_hall h ON h.id = k.hall_id WHERE h.site_id = %s"
        " GROUP BY r.node_id, r.gpu"
    )
    out: set[GpuKey] = set()
    with connections[using].cursor() as cur:
        cur.execute(sql, [int(since), int(since), int(until), site_id])
        for node, gpu, n, sx, sxx, sv, sxv, svv in cur.fetchall():
            if n >= max(min_points, 3) and _rises(n, sx, sxx, sv, sxv, svv):
                out.add((int(node), int(gpu)))
    return out


def _rises(n: int, sx: float, sxx: float, sv: float, sxv: float, svv: float) -> bool:
    """The least-squares slope from the sums is above zero at `SCREEN_T` (plain t)."""
    cxx = sxx - sx * sx / n
    cxy = sxv - sx * sv / n
    cyy = svv - sv * sv / n
    if cxx <= 0 or cxy <= 0:
        return False
    slope = cxy / cxx
    sse = max(cyy - slope * cxy, 0.0)
    if sse == 0.0:
        return True  # a straight rise: nothing to test it against
    return slope / math.sqrt(sse / (n - 2) / cxx) >= SCREEN_T


def _temps(keys: Iterable[GpuKey], since: float, until: float, tier: str, using: str) -> Points:
    """The GPUs' temperature means per whole bucket in [since, until), at bucket centres."""
    wanted = set(keys)
    nodes = sorted({node for node, _ in wanted})
    step = TIER_SECONDS[tier]
    out: Points = {}
    with connections[using].cursor() as cur:
        for i in range(0, len(nodes), _CHUNK):
            chunk = nodes[i : i + _CHUNK]
            marks = ", ".join(["%s"] * len(chunk))
            cur.execute(
                f"SELECT node_id, gpu, bucket, temp_gpu_c_mean FROM {rollup_table('gpu', tier)}"
                f" WHERE node_id IN ({marks}) AND bucket >= %s AND bucket + {step} <= %s"
                " AND temp_gpu_c_mean IS NOT NULL ORDER BY node_id, gpu, bucket",
                [*chunk, int(since), int(until)],
            )
            for node, gpu, bucket, value in cur.fetchall():
                key = (int(node), int(gpu))
                if key in wanted:
                    out.setdefault(key, []).append((int(bucket) + step / 2, float(value)))
    return out


def gpu_forecasts(
    site_id: int, now: float, using: str, params: ForecastParams = PARAMS
) -> list[GpuForecast]:
    """The site's rising GPUs (the screen's), each forecast against its limit, in (node,
    index) order; a GPU the screen passes by has no entry."""
    since = now - params.recent_s
    gpus = _site_gpus(site_id, using)
    keys = sorted(
        k for k in rising_gpus(site_id, since, now, using, params.min_points) if k in gpus
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
