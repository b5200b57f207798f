"""Time to limit: when a rising series will pass its limit, at its present trend.

Pure arithmetic on (time, value) points; no database and no Django (the readers that
build the series from the rollups are fleet/read/forecast_sources.py). The method, its
parameters and their reasons are written out in docs/forecast.md; in short:

1. **Daily pattern** (when `daily` holds hourly means over enough days and its hours of
   the day differ by more than noise would make them): the hourly series is detrended by
   least squares, its residuals are averaged per hour of the day and centred, and that
   profile (shrunk by its James–Stein factor; interpolated between hour centres, around
   the clock) is taken out of the recent series before the trend fit and added back to
   the projection.
2. **Trend**: ordinary least squares over the recent points (the 1-minute means). The
   slope's standard error is widened for autocorrelated residuals (the effective number
   of points, n·(1−r₁)/(1+r₁)), so a slow wander is not taken for a trend.
3. **Verdicts**: too few points, already at or past the limit, flat, a slope not
   significant at `PARAMS.confidence` (too noisy), falling, or a crossing whose
   prediction interval reaches further ahead than the series reaches back
   (`beyond_horizon`) are each a `NoForecast` with its reason: falsy, so `if forecast:`
   reads as "there is one" (nvitop's "unsupported is a value"). Otherwise a `Forecast`:
   when the projection reaches the limit, and the interval from the first time the
   upper prediction bound reaches it to the first time the lower bound does.

The parameters are `ForecastParams`, one instance (`PARAMS`), here and nowhere else.
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

__all__ = (
    "PARAMS",
    "DailyProfile",
    "Forecast",
    "ForecastParams",
    "NoForecast",
    "Reason",
    "daily_profile",
    "t_quantile",
    "time_to_limit",
)

DAY_S = 86_400
HOUR_S = 3_600

Point = tuple[float, float]  # (epoch seconds, value)


@dataclass(frozen=True)
class ForecastParams:
    """Fleetwatch's choices; docs/forecast.md gives the reason for each."""

    recent_s: float = 3 * HOUR_S  # the trend is fitted to this much of 1-minute means
    pattern_days: int = 7  # the daily pattern is learnt from this many days of hourly means
    min_points: int = 30  # half an hour of 1-minute means
    min_effective_points: float = 7.0  # t quantile needs ≥ 5 degrees of freedom
    confidence: float = 0.999  # one-sided, for "the slope is above zero"
    interval: float = 0.90  # two-sided prediction interval of the crossing
    horizon_fraction: float = 1.0  # forecast no further ahead than the fit reaches back
    step_s: float = 60.0  # the projection is walked in 1-minute steps
    pattern_min_days: int = 3  # each hour of the day seen on at least this many days
    pattern_passes: int = 4  # alternations of trend and profile (converged by the third)
    pattern_confidence: float = 0.999  # the hours of the day differ by more than noise would
    flat_tolerance: float = 1e-9  # relative: values that vary less are flat


PARAMS = ForecastParams()


class Reason(enum.StrEnum):
    """Why there is no forecast."""

    TOO_SHORT = "too_short"
    ALREADY_OVER = "already_over"
    FLAT = "flat"
    NOISY = "noisy"
    FALLING = "falling"
    BEYOND_HORIZON = "beyond_horizon"


@dataclass(frozen=True)
class NoForecast:
    """No crossing to forecast, and why. Falsy."""

    reason: Reason

    def __bool__(self) -> bool:
        return False


@dataclass(frozen=True)
class Forecast:
    """The projection reaches `limit` at `crossing_at` (epoch s); `earliest` and `latest`
    bound it at `PARAMS.interval`: when the upper and the lower prediction bounds reach
    it. `level` is the projection at `now`; `slope_per_h` its trend."""

    now: float
    limit: float
    level: float
    slope_per_h: float
    crossing_at: float
    earliest: float
    latest: float
    points: int
    daily: bool  # a daily pattern was taken out and added back

    @property
    def in_s(self) -> float:
        return self.crossing_at - self.now


@dataclass(frozen=True)
class DailyProfile:
    """The mean departure from the trend per hour of the day (UTC; the phase is learnt
    from the data, so the site's time zone does not matter), centred on zero."""

    by_hour: tuple[float, ...]  # 24 values, hour h's centre at h·3600 + 1800 s of the day

    def at(self, t: float) -> float:
        """The profile at time `t`, linear between hour centres, around midnight."""
        x = (t % DAY_S - HOUR_S / 2) / HOUR_S
        lo = math.floor(x)
        frac = x - lo
        a = self.by_hour[lo % 24]
        b = self.by_hour[(lo + 1) % 24]
        return a + (b - a) * frac


@dataclass(frozen=True)
class _Fit:
    intercept: float  # at x = 0 (time relative to the mean time)
    slope: float  # per second
    t_mean: float
    n: int
    n_eff: float
    resid_sd: float
    sxx: float

    def at(self, t: float) -> float:
        return self.intercept + self.slope * (t - self.t_mean)

    @property
    def inflation(self) -> float:
        """How much autocorrelation widens the mean's and slope's variances."""
        return max(1.0, (self.n - 2) / (self.n_eff - 2))

    @property
    def slope_se(self) -> float:
        return math.sqrt(self.inflation) * self.resid_sd / math.sqrt(self.sxx)

    @property
    def df(self) -> float:
        return self.n_eff - 2

    def prediction_sd(self, t: float) -> float:
        """The standard deviation of one new point at `t` about the fitted line."""
        dx = t - self.t_mean
        spread = self.inflation * (1 / self.n + dx * dx / self.sxx)
        return self.resid_sd * math.sqrt(1 + spread)


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile, by the Cornish–Fisher expansion about the normal quantile
    (Abramowitz & Stegun 26.7.5): within 0.02 of the tables at ≥ 5 degrees of freedom
    for the levels used here (no SciPy in Fleetwatch's dependencies)."""
    z = NormalDist().inv_cdf(p)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


def _fit(points: Sequence[Point]) -> _Fit:
    n = len(points)
    t_mean = math.fsum(t for t, _ in points) / n
    v_mean = math.fsum(v for _, v in points) / n
    sxx = math.fsum((t - t_mean) ** 2 for t, _ in points)
    sxy = math.fsum((t - t_mean) * (v - v_mean) for t, v in points)
    slope = sxy / sxx
    resid = [v - v_mean - slope * (t - t_mean) for t, v in points]
    sse = math.fsum(r * r for r in resid)
    resid_sd = math.sqrt(sse / (n - 2))
    return _Fit(v_mean, slope, t_mean, n, _effective_points(resid, sse), resid_sd, sxx)


def _effective_points(resid: Sequence[float], sse: float) -> float:
    """n·(1−r₁)/(1+r₁), r₁ the residuals' lag-1 autocorrelation (negative taken as 0: it
    would claim more independent points than there are)."""
    n = len(resid)
    if sse <= 0:
        return float(n)
    r1 = math.fsum(a * b for a, b in itertools.pairwise(resid)) / sse
    r1 = min(max(r1, 0.0), 0.99)
    return n * (1 - r1) / (1 + r1)


def daily_profile(hourly: Iterable[Point], params: ForecastParams = PARAMS) -> DailyProfile | None:
    """The hour-of-day profile of `hourly` (1-hour means, each stamped at its bucket's
    centre), or None unless every hour of the day is seen on `params.pattern_min_days`
    days and the hours differ by more than noise would make them (an F test at
    `params.pattern_confidence`: a profile of noise, added to a projection, moves the
    crossing by as much as the noise). The trend over the days and the profile are fitted
    together (alternating least squares: the trend of the series less the profile, the
    profile of the series less the trend), so neither a rise over the days is read as a
    pattern nor a pattern over a few days as a rise."""
    points = sorted(hourly)
    hours = [int(t % DAY_S // HOUR_S) for t, _ in points]
    counts = [hours.count(h) for h in range(24)]
    if min(counts) < params.pattern_min_days:
        return None
    profile = [0.0] * 24
    for _ in range(params.pattern_passes):
        fit = _fit([(t, v - profile[h]) for (t, v), h in zip(points, hours, strict=True)])
        sums = [0.0] * 24
        for (t, v), h in zip(points, hours, strict=True):
            sums[h] += v - fit.at(t)
        means = [sums[h] / counts[h] for h in range(24)]
        centre = math.fsum(means) / 24
        profile = [m - centre for m in means]
    f_stat = _hour_of_day_f(points, hours, fit)
    if f_stat is None or _f_upper_z(f_stat, 23, len(points) - 26) < _z(params.pattern_confidence):
        return None
    # The James–Stein factor: the profile shrunk towards none by as much as noise alone
    # would explain of its spread, so a weak pattern counts for what it is worth.
    shrink = max(0.0, 1.0 - (24 - 2) / (24 * f_stat))
    return DailyProfile(tuple(shrink * p for p in profile))


def _hour_of_day_f(points: Sequence[Point], hours: Sequence[int], fit: _Fit) -> float | None:
    """The one-way F statistic of the residuals about the trend grouped by hour of the day:
    how much more the hours differ than the points within an hour do (23 and n − 26
    degrees of freedom: 24 hour means and the trend's two). None when there are too few
    points to tell or no spread at all."""
    n = len(points)
    if n < 28:
        return None
    resid = [v - fit.at(t) for t, v in points]
    groups: list[list[float]] = [[] for _ in range(24)]
    for r, h in zip(resid, hours, strict=True):
        groups[h].append(r)
    grand = math.fsum(resid) / n
    means = [math.fsum(g) / len(g) for g in groups]
    between = math.fsum(len(g) * (m - grand) ** 2 for g, m in zip(groups, means, strict=True))
    within = math.fsum((r - means[h]) ** 2 for r, h in zip(resid, hours, strict=True))
    if within <= 0:
        return math.inf if between > 0 else None
    return (between / 23) / (within / (n - 26))


def _z(p: float) -> float:
    return NormalDist().inv_cdf(p)


def _f_upper_z(f: float, d1: int, d2: int) -> float:
    """The normal deviate matching F(d1, d2) = f, by Paulson's cube-root approximation
    (Abramowitz & Stegun 26.6.15): compared with a normal quantile, it is an F test
    without SciPy."""
    if math.isinf(f):
        return math.inf
    a, b = 2 / (9 * d1), 2 / (9 * d2)
    cube: float = f ** (1 / 3)
    return ((1 - b) * cube - (1 - a)) / math.sqrt(a + cube * cube * b)


def time_to_limit(
    series: Sequence[Point],
    limit: float,
    now: float,
    *,
    daily: Sequence[Point] = (),
    params: ForecastParams = PARAMS,
) -> Forecast | NoForecast:
    """When `series` (recent 1-minute means) passes `limit` at its trend, with `daily`
    (hourly means over the last days) giving the daily pattern if there are enough of
    them. Points are (epoch s, value), each stamped at its bucket's centre (the time a
    bucket's mean describes). A `NoForecast` (falsy) says why there is none."""
    points = sorted(series)
    if len(points) < params.min_points:
        return NoForecast(Reason.TOO_SHORT)
    if points[-1][1] >= limit:
        return NoForecast(Reason.ALREADY_OVER)
    # The pattern is learnt from the hours before the fit's window: a rise inside it would
    # otherwise be read partly as "this hour of the day runs high" and flatten the trend.
    profile = daily_profile([p for p in daily if p[0] < points[0][0]], params)
    if profile is not None:
        points = [(t, v - profile.at(t)) for t, v in points]
    if _is_flat(points, params):
        return NoForecast(Reason.FLAT)
    fit = _fit(points)
    if fit.n_eff < params.min_effective_points:
        return NoForecast(Reason.NOISY)
    t_stat = fit.slope / fit.slope_se if fit.slope_se > 0 else math.copysign(math.inf, fit.slope)
    critical = t_quantile(params.confidence, fit.df)
    if t_stat <= -critical:
        return NoForecast(Reason.FALLING)
    if t_stat < critical:
        return NoForecast(Reason.NOISY)
    return _project(fit, profile, limit, now, points, params)


def _is_flat(points: Sequence[Point], params: ForecastParams) -> bool:
    values = [v for _, v in points]
    scale = max(1.0, max(abs(v) for v in values))
    return max(values) - min(values) <= params.flat_tolerance * scale


def _project(
    fit: _Fit,
    profile: DailyProfile | None,
    limit: float,
    now: float,
    points: Sequence[Point],
    params: ForecastParams,
) -> Forecast | NoForecast:
    """Walk the projection forward from `now` in steps to the horizon."""
    horizon = now + params.horizon_fraction * (now - points[0][0])
    q = t_quantile(0.5 + params.interval / 2, fit.df)

    def expected(t: float) -> float:
        return fit.at(t) + (profile.at(t) if profile is not None else 0.0)

    def upper(t: float) -> float:
        return expected(t) + q * fit.prediction_sd(t)

    def lower(t: float) -> float:
        return expected(t) - q * fit.prediction_sd(t)

    # A forecast is made only when even the lower prediction bound reaches the limit
    # within the horizon: a crossing that might as well not come is not announced.
    crossing = _first_crossing(expected, limit, now, horizon, params.step_s)
    latest = _first_crossing(lower, limit, now, horizon, params.step_s)
    if crossing is None or latest is None:
        return NoForecast(Reason.BEYOND_HORIZON)
    # The upper bound is above the projection, so it reaches the limit no later.
    earliest = _first_crossing(upper, limit, now, crossing, params.step_s)
    return Forecast(
        now=now,
        limit=limit,
        level=expected(now),
        slope_per_h=fit.slope * HOUR_S,
        crossing_at=crossing,
        earliest=crossing if earliest is None else earliest,
        latest=latest,
        points=fit.n,
        daily=profile is not None,
    )


def _first_crossing(
    f: Callable[[float], float], limit: float, start: float, end: float, step: float
) -> float | None:
    """The first time in [start, end] at which `f` reaches `limit` (`start` if it is
    there already), linear between steps; None if it does not."""
    t0, v0 = start, f(start)
    if v0 >= limit:
        return start
    while t0 < end:
        t1 = min(t0 + step, end)
        v1 = f(t1)
        if v1 >= limit:
            return t0 + (t1 - t0) * (limit - v0) / (v1 - v0)
        t0, v0 = t1, v1
    return None
