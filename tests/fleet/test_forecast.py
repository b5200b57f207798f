"""Time to limit (fleet/read/forecast.py) on simulated rollup series whose true crossing
time is known: linear ramps are forecast within 10 % of it, a ramp on a daily pattern
too, and flat, noisy, falling, short or already-over series get no forecast — over 200
seeded noisy series, not one false alarm."""

from __future__ import annotations

from statistics import NormalDist

import pytest

from fleet.read.forecast import (
    PARAMS,
    Forecast,
    NoForecast,
    Reason,
    _f_upper_z,
    daily_profile,
    t_quantile,
    time_to_limit,
)
from tests.support.series import daily_wave, first_reach, ramp, sampled

DAY = 86_400
NOW = 1_800_000_000 - 1_800_000_000 % DAY + 11 * 3600  # 11:00 UTC


def crossing_error(forecast: Forecast | NoForecast, true_at: float) -> float:
    """The forecast's error as a share of the true time left."""
    assert isinstance(forecast, Forecast), forecast
    return abs(forecast.crossing_at - true_at) / (true_at - NOW)


@pytest.mark.parametrize("per_h", [1.0, 5.0, 20.0])
@pytest.mark.parametrize("minutes_left", [20, 40, 90])
def test_a_linear_ramp_is_forecast_within_ten_percent_of_its_crossing(per_h, minutes_left):
    limit = 45.0
    level_now = limit - per_h * minutes_left / 60
    # noise a twentieth of the rise still to come: a ramp plainly visible in the minutes
    sd = 0.05 * (limit - level_now)
    for seed in range(20):
        points = sampled(ramp(level_now, NOW, per_h), NOW, 3, sd=sd, seed=seed)
        forecast = time_to_limit(points, limit, NOW)
        assert crossing_error(forecast, NOW + minutes_left * 60) < 0.10


def test_the_interval_holds_the_forecast_and_the_true_crossing():
    true_at = NOW + 40 * 60
    held = 0
    for seed in range(50):
        points = sampled(ramp(40.0, NOW, 7.5), NOW, 3, sd=0.5, seed=seed)
        forecast = time_to_limit(points, 45.0, NOW)
        assert isinstance(forecast, Forecast)
        assert NOW <= forecast.earliest <= forecast.crossing_at <= forecast.latest
        held += forecast.earliest <= true_at <= forecast.latest
    assert held >= 45  # a 90 % interval


def test_the_forecast_says_the_level_and_the_trend():
    points = sampled(ramp(40.0, NOW, 6.0), NOW, 2)
    forecast = time_to_limit(points, 45.0, NOW)
    assert isinstance(forecast, Forecast)
    assert forecast.level == pytest.approx(40.0)
    assert forecast.slope_per_h == pytest.approx(6.0)
    assert forecast.in_s == pytest.approx(50 * 60)
    assert forecast.points == 120 and not forecast.daily


def test_a_ramp_on_a_daily_pattern_is_forecast_with_the_pattern_added_back():
    """The site's load follows the day (±6 kW, peak at 15:00) and a job started three
    hours ago adds 2 kW an hour. The limit is reached as the day's rise flattens, which a
    straight line through the last three hours overshoots."""
    wave = daily_wave(6.0)
    began = NOW - 3 * 3600

    def load(t: float) -> float:
        return 30 + wave(t) + max(0.0, 2.0 * (t - began) / 3600)

    limit = 46.0
    true_at = first_reach(load, limit, NOW, NOW + 6 * 3600)
    for seed in range(20):
        recent = sampled(load, NOW, 3, sd=0.3, seed=seed)
        # hourly means over a week, stamped at each hour's centre; a mean of 60 minutes
        # is as much quieter as that
        hourly = sampled(load, NOW - 1800, 7 * 24, step_s=3600, sd=0.04, seed=seed + 1)
        with_pattern = time_to_limit(recent, limit, NOW, daily=hourly)
        assert isinstance(with_pattern, Forecast) and with_pattern.daily
        assert crossing_error(with_pattern, true_at) < 0.10
        assert crossing_error(time_to_limit(recent, limit, NOW), true_at) > 0.10


def test_a_daily_profile_needs_every_hour_on_enough_days():
    wave = daily_wave(3.0)
    days = PARAMS.pattern_min_days
    enough = sampled(wave, NOW - 1800, 24 * days, step_s=3600)
    profile = daily_profile(enough)
    assert profile is not None
    assert profile.at(15 * 3600) == pytest.approx(3.0, abs=0.05)  # the peak
    assert profile.at(3 * 3600) == pytest.approx(-3.0, abs=0.05)  # the trough
    assert daily_profile(enough[1:]) is None  # one hour of the day seen on fewer days


def test_a_week_of_noise_is_not_taken_for_a_daily_pattern():
    """Hourly means that differ only by noise (1 % of 8.75 kW) give no profile: added back
    to a projection, a profile of noise moves the crossing by as much as the noise."""
    weeks = [
        sampled(lambda t: 8.75, NOW - 1800, 7 * 24, step_s=3600, sd=0.0875, seed=seed)
        for seed in range(50)
    ]
    assert [daily_profile(week) for week in weeks] == [None] * 50


def test_a_short_ramp_after_a_week_of_noise_is_forecast_as_its_trend():
    """A feed 95 % loaded rising 1.25 kW/h, its limit 22 minutes away, after a steady week
    of noisy hours: the week's noise does not bend the line (it did, by up to 27 %, when
    every profile was taken)."""
    limit, level_now, per_h = 9.2, 8.75, 1.25
    true_at = NOW + (limit - level_now) / per_h * 3600
    for seed in range(20):
        recent = sampled(ramp(level_now, NOW, per_h), NOW, 3, sd=0.0875, seed=seed)
        week = sampled(lambda t: 5.0, NOW - 3 * 3600 - 1800, 7 * 24, step_s=3600, sd=0.0875,
                       seed=seed + 100)  # fmt: skip
        forecast = time_to_limit(recent, limit, NOW, daily=week)
        assert isinstance(forecast, Forecast) and not forecast.daily
        assert crossing_error(forecast, true_at) < 0.10


@pytest.mark.parametrize(
    ("f", "d1", "d2", "p"),
    [(2.03, 20, 120, 0.99), (1.61, 24, 120, 0.95), (1.79, 24, 10**6, 0.99)],
)
def test_the_f_test_matches_the_tables(f, d1, d2, p):
    assert _f_upper_z(f, d1, d2) == pytest.approx(NormalDist().inv_cdf(p), abs=0.02)


def test_a_flat_series_has_no_forecast():
    points = sampled(lambda t: 30.0, NOW, 3)
    assert time_to_limit(points, 45.0, NOW) == NoForecast(Reason.FLAT)


@pytest.mark.parametrize("ar", [0.0, 0.5, 0.9, 0.95])
@pytest.mark.parametrize("limit", [34.0, 36.0, 40.0])
def test_noise_without_a_trend_raises_no_false_alarm_over_200_series(ar, limit):
    """30 kW with a spread of 1.5 kW, as independent minutes and as a wander (AR(1), lag-1
    correlation up to 0.95: a time constant of 20 minutes), against limits 2.7 to 6.7
    spreads above the mean."""
    alarms = [
        seed
        for seed in range(200)
        if time_to_limit(sampled(lambda t: 30.0, NOW, 3, sd=1.5, ar=ar, seed=seed), limit, NOW)
    ]
    assert alarms == []


def test_noise_without_a_trend_is_called_noisy():
    reasons = {
        time_to_limit(sampled(lambda t: 30.0, NOW, 3, sd=1.5, seed=seed), 40.0, NOW)
        for seed in range(20)
    }
    assert reasons == {NoForecast(Reason.NOISY)}


def test_a_falling_series_has_no_forecast():
    points = sampled(ramp(40.0, NOW, -5.0), NOW, 3, sd=0.3)
    assert time_to_limit(points, 45.0, NOW) == NoForecast(Reason.FALLING)


def test_a_series_already_over_its_limit_has_no_forecast():
    points = sampled(ramp(46.0, NOW, 5.0), NOW, 3)
    assert time_to_limit(points, 45.0, NOW) == NoForecast(Reason.ALREADY_OVER)


def test_too_few_points_have_no_forecast():
    points = sampled(ramp(40.0, NOW, 5.0), NOW, (PARAMS.min_points - 1) / 60)
    assert len(points) == PARAMS.min_points - 1
    assert time_to_limit(points, 42.0, NOW) == NoForecast(Reason.TOO_SHORT)
    # one more minute makes half an hour: enough for a crossing within half an hour
    assert time_to_limit([*points, (NOW + 60, 40.0 + 5 / 60)], 42.0, NOW + 60)


def test_a_crossing_further_ahead_than_the_series_reaches_back_is_not_forecast():
    # one hour of rise, the limit four hours away at this trend
    points = sampled(ramp(40.0, NOW, 1.25), NOW, 1, sd=0.05)
    assert time_to_limit(points, 45.0, NOW) == NoForecast(Reason.BEYOND_HORIZON)
    longer = sampled(ramp(40.0, NOW, 1.25), NOW, 5, sd=0.05)
    assert crossing_error(time_to_limit(longer, 45.0, NOW), NOW + 4 * 3600) < 0.10


def test_no_forecast_is_falsy_and_a_forecast_is_not():
    assert not NoForecast(Reason.FLAT)
    assert time_to_limit(sampled(ramp(40.0, NOW, 5.0), NOW, 2), 45.0, NOW)


@pytest.mark.parametrize(
    ("p", "df", "table"),
    [
        (0.999, 5, 5.893),
        (0.999, 10, 4.144),
        (0.999, 30, 3.385),
        (0.95, 5, 2.015),
        (0.95, 10, 1.812),
        (0.975, 30, 2.042),
    ],
)
def test_the_t_quantile_matches_the_tables(p, df, table):
    assert t_quantile(p, df) == pytest.approx(table, abs=0.02)
