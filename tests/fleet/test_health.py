"""fleet.health: the derived figures and levels every page, alert and exporter shares.

Pure unit tests: no database, no Django.
"""

from __future__ import annotations

import json

import pytest

from agents.protocol import reasons as nvml
from fleet.health import (
    GpuLimits,
    Level,
    NodeSummary,
    Reading,
    gpu_headroom,
    gpu_summary,
    headroom_level,
    inlet_level,
    leak_level,
    newest_ts,
    node_power,
    node_summary,
    power_vs_cap,
    rack_power,
    rack_power_level,
    rack_summary,
    stale,
    throttle_state,
    worst,
)
from tests.support.health_readings import (
    CRIT,
    H100,
    H100_TLIMIT,
    NOW,
    OK,
    UNKNOWN,
    WARN,
    cool_gpu,
    node,
    reading,
)

# --- levels ------------------------------------------------------------------------------


def test_worst_ranks_crit_over_warn_over_unknown_over_ok() -> None:
    assert worst(OK, UNKNOWN) is UNKNOWN
    assert worst(UNKNOWN, WARN, OK) is WARN
    assert worst(WARN, CRIT, UNKNOWN) is CRIT
    assert [lv.rank for lv in (OK, UNKNOWN, WARN, CRIT)] == [0, 1, 2, 3]


def test_an_unknown_signal_never_hides_a_warning_and_never_reads_as_ok() -> None:
    assert worst(UNKNOWN, WARN) is WARN
    assert worst(OK, OK, UNKNOWN) is not OK


def test_worst_of_nothing_is_unknown_not_ok() -> None:
    assert worst() is UNKNOWN


def test_levels_serialise_as_the_strings_the_browser_renders() -> None:
    assert json.dumps([OK, UNKNOWN, WARN, CRIT]) == '["ok", "unknown", "warn", "crit"]'


# --- readings and staleness ------------------------------------------------------------------


def test_a_metric_never_seen_has_no_age_and_no_value() -> None:
    r = reading(temp_gpu_c=50)
    assert r.age_s("temp_mem_c", NOW) is None
    assert r.fresh("temp_mem_c", NOW, 30) is None


def test_a_value_is_fresh_only_within_the_stale_window() -> None:
    assert reading(29.9, power_w=100).fresh("power_w", NOW, 30) == 100
    assert reading(30.0, power_w=100).fresh("power_w", NOW, 30) is None
    assert reading(29.9, power_w=100).age_s("power_w", NOW) == pytest.approx(29.9)


def test_a_clock_running_ahead_counts_as_now() -> None:
    r = reading(-120, power_w=100)
    assert r.age_s("power_w", NOW) == 0.0
    assert r.fresh("power_w", NOW, 30) == 100


def test_a_value_without_a_sample_time_is_not_fresh() -> None:
    r = Reading({"power_w": 100}, {})
    assert r.fresh("power_w", NOW, 30) is None
    assert stale(r, NOW)


def test_a_reading_is_stale_only_when_nothing_in_it_is_fresh() -> None:
    mixed = Reading({"a": 1, "b": 2}, {"a": NOW - 300, "b": NOW - 5})
    assert not stale(mixed, NOW, 30)
    assert stale(reading(31, a=1), NOW, 30)
    assert stale(Reading({}, {}), NOW, 30)


def test_newest_ts_is_the_latest_sample_and_none_for_an_empty_reading() -> None:
    r = Reading({"a": 1, "b": 2}, {"a": NOW - 300, "b": NOW - 5, "gone": NOW})
    assert newest_ts(r) == NOW - 5
    assert newest_ts(Reading({}, {})) is None


# --- headroom ------------------------------------------------------------------------------


def test_headroom_uses_the_absolute_limits_first() -> None:
    limits = GpuLimits(slowdown_c=89, shutdown_c=92, gpu_max_c=87, tlimit_slowdown_c=-2)
    h = gpu_headroom(reading(temp_gpu_c=80, temp_margin_c=1), limits, NOW)
    assert (h.slowdown_c, h.shutdown_c, h.gpu_max_c) == (9.0, 12.0, 7.0)
    assert h.level is WARN


def test_headroom_falls_back_to_the_tlimit_form_when_only_it_exists() -> None:
    h = gpu_headroom(reading(temp_gpu_c=30, temp_margin_c=57), H100_TLIMIT, NOW)
    assert (h.slowdown_c, h.shutdown_c, h.gpu_max_c) == (59.0, 65.0, 57.0)
    assert h.level is OK


def test_hbm_headroom_is_mem_max_minus_the_memory_temperature() -> None:
    h = gpu_headroom(reading(temp_gpu_c=60, temp_mem_c=85), H100, NOW)
    assert h.mem_max_c == 10.0


def test_a_hot_hbm_raises_the_level_even_with_die_headroom_to_spare() -> None:
    h = gpu_headroom(reading(temp_gpu_c=50, temp_mem_c=93), H100, NOW)
    assert h.slowdown_c == 39.0 and h.level is CRIT


def test_a_gpu_without_an_hbm_sensor_is_judged_on_its_die_alone() -> None:
    h = gpu_headroom(reading(temp_gpu_c=50), H100, NOW)
    assert h.mem_max_c is None and h.level is OK


def test_headroom_is_none_and_unknown_without_limits_or_temperature() -> None:
    for h in (
        gpu_headroom(reading(temp_gpu_c=50), None, NOW),
        gpu_headroom(reading(power_w=300), H100, NOW),
        gpu_headroom(reading(temp_margin_c=40), H100, NOW),
    ):
        assert (h.slowdown_c, h.shutdown_c, h.gpu_max_c, h.mem_max_c) == (None,) * 4
        assert h.level is UNKNOWN


def test_a_stale_temperature_gives_no_headroom() -> None:
    h = gpu_headroom(reading(45, temp_gpu_c=88), H100, NOW)
    assert h.slowdown_c is None and h.level is UNKNOWN


@pytest.mark.parametrize(
    ("headroom_c", "level"),
    [(25, OK), (10.1, OK), (10, WARN), (3.1, WARN), (3, CRIT), (-4, CRIT), (None, UNKNOWN)],
)
def test_headroom_warns_at_10_c_and_is_critical_at_3_c(
    headroom_c: float | None, level: Level
) -> None:
    assert headroom_level(headroom_c) is level


# --- throttling ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bit", [nvml.HW_THERMAL_SLOWDOWN, nvml.SW_THERMAL_SLOWDOWN, nvml.HW_SLOWDOWN]
)
def test_thermal_bits_are_thermal_throttling_and_critical(bit: int) -> None:
    t = throttle_state(bit)
    assert t.throttling and len(t.thermal) == 1 and t.power == ()
    assert t.level is CRIT


def test_a_power_brake_is_power_throttling_and_critical() -> None:
    t = throttle_state(nvml.HW_POWER_BRAKE_SLOWDOWN)
    assert t.throttling and t.power == ("hw_power_brake",) and t.thermal == ()
    assert t.level is CRIT


def test_holding_at_the_power_cap_is_power_throttling_but_no_warning_by_itself() -> None:
    t = throttle_state(nvml.SW_POWER_CAP)
    assert t.throttling and t.power == ("power_cap",)
    assert t.level is OK


def test_idle_and_configured_clocks_are_not_throttling() -> None:
    mask = (
        nvml.GPU_IDLE | nvml.SYNC_BOOST | nvml.APPLICATIONS_CLOCKS_SETTING
    ) | nvml.DISPLAY_CLOCK_SETTING
    t = throttle_state(mask)
    assert not t.throttling and t.level is OK
    assert t.benign == ("gpu_idle", "clocks_setting", "sync_boost", "display_clocks")


def test_reasons_decode_in_bit_order_with_unknown_bits_named() -> None:
    t = throttle_state(nvml.HW_THERMAL_SLOWDOWN | nvml.SW_POWER_CAP | 0x200)
    assert t.reasons == ("power_cap", "hw_thermal", "bit_0x200")
    assert t.thermal == ("hw_thermal",) and t.power == ("power_cap",)
    assert t.level is CRIT


def test_a_clear_mask_is_ok_and_an_unsupported_one_is_unknown() -> None:
    assert throttle_state(0).level is OK and not throttle_state(0).throttling
    t = throttle_state(None)
    assert t.level is UNKNOWN and not t.throttling and t.reasons == ()


# --- power against the cap -------------------------------------------------------------------


def test_power_is_a_fraction_of_the_enforced_cap() -> None:
    r = reading(power_w=450, power_limit_w=500)
    assert power_vs_cap(r, H100, NOW) == pytest.approx(0.9)


def test_the_max_power_limit_stands_in_when_no_enforced_cap_is_reported() -> None:
    assert power_vs_cap(reading(power_w=350), H100, NOW) == pytest.approx(0.5)


def test_power_vs_cap_is_none_without_power_or_cap_or_when_stale() -> None:
    assert power_vs_cap(reading(power_w=350), None, NOW) is None
    assert power_vs_cap(reading(power_limit_w=700), H100, NOW) is None
    assert power_vs_cap(reading(60, power_w=350, power_limit_w=700), H100, NOW) is None
    assert power_vs_cap(reading(power_w=350, power_limit_w=0), None, NOW) is None


# --- one GPU -------------------------------------------------------------------------------


def test_a_cool_gpu_is_ok_with_its_figures() -> None:
    g = gpu_summary(cool_gpu(clock_event_reasons=nvml.GPU_IDLE, power_limit_w=700), H100, NOW)
    assert (g.temp_c, g.power_w, g.headroom.slowdown_c) == (60.0, 500.0, 29.0)
    assert g.power_frac == pytest.approx(500 / 700)
    assert g.ts == NOW and not g.stale and g.level is OK


def test_a_stale_gpu_is_unknown_and_shows_no_live_figures() -> None:
    g = gpu_summary(cool_gpu(31, clock_event_reasons=nvml.HW_THERMAL_SLOWDOWN), H100, NOW)
    assert g.stale and g.level is UNKNOWN
    assert (g.temp_c, g.power_w, g.headroom.slowdown_c) == (None, None, None)
    assert not g.throttle.throttling
    assert g.ts == NOW - 31


def test_a_gpu_without_a_clock_event_mask_is_judged_on_its_headroom() -> None:
    g = gpu_summary(cool_gpu(), H100, NOW)
    assert g.throttle.level is UNKNOWN and g.level is OK


def test_a_thermally_throttled_gpu_with_headroom_to_spare_is_critical() -> None:
    g = gpu_summary(cool_gpu(clock_event_reasons=nvml.SW_THERMAL_SLOWDOWN), H100, NOW)
    assert g.headroom.level is OK and g.level is CRIT


def test_a_gpu_whose_limits_are_not_known_is_unknown_not_ok() -> None:
    assert gpu_summary(cool_gpu(clock_event_reasons=0), None, NOW).level is UNKNOWN


# --- air and leaks -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("temp_c", "level"),
    [(22, OK), (27, OK), (27.5, WARN), (32, WARN), (32.5, CRIT), (None, UNKNOWN)],
)
def test_inlet_air_warns_above_ashrae_recommended_and_is_critical_above_a1(
    temp_c: float | None, level: Level
) -> None:
    assert inlet_level(temp_c) is level


@pytest.mark.parametrize(("leak", "level"), [(0, OK), (1, WARN), (2, CRIT), (None, UNKNOWN)])
def test_a_leak_detector_warns_at_1_and_is_critical_at_2(leak: int | None, level: Level) -> None:
    assert leak_level(leak) is level


# --- one node ------------------------------------------------------------------------------


def test_a_node_sums_gpu_power_and_finds_its_hottest_gpu_and_least_headroom() -> None:
    n = node(cool_gpu(temp_gpu_c=70, power_w=600.04), cool_gpu(temp_gpu_c=81, power_w=650))
    assert n.gpu_power_w == 1250.0
    assert (n.max_temp_c, n.min_headroom_c) == (81.0, 8.0)
    assert n.level is WARN and not n.stale


def test_a_node_counts_thermal_and_power_throttled_gpus_separately() -> None:
    n = node(
        cool_gpu(clock_event_reasons=nvml.HW_THERMAL_SLOWDOWN | nvml.SW_POWER_CAP),
        cool_gpu(clock_event_reasons=nvml.SW_POWER_CAP),
        cool_gpu(clock_event_reasons=nvml.GPU_IDLE),
    )
    assert (n.throttling_thermal, n.throttling_power) == (1, 2)
    assert n.level is CRIT


def test_one_silent_gpu_beside_reporting_ones_is_lost_and_makes_the_node_critical() -> None:
    # Its node reports (a sibling is fresh): the silent GPU fell off the bus, the worst
    # hardware state, never "no data" (issue 18).
    n = node(cool_gpu(), cool_gpu(60))
    assert n.stale_gpus == 1 and n.lost_gpus == 1 and not n.stale
    assert n.gpu_power_w == 500.0
    assert n.level is CRIT


def test_gpus_of_a_silent_node_are_no_data_not_lost() -> None:
    n = node(cool_gpu(60), cool_gpu(60))
    assert n.stale and n.lost_gpus == 0 and n.level is UNKNOWN


def test_a_silent_gpu_does_not_hide_a_hot_one() -> None:
    assert node(cool_gpu(temp_gpu_c=87), cool_gpu(60)).level is CRIT


def test_a_node_with_nothing_fresh_is_stale_and_unknown() -> None:
    n = node(cool_gpu(60), meter=reading(60, power_w=9000))
    assert n.stale and n.level is UNKNOWN
    assert (n.gpu_power_w, n.power_w, n.max_temp_c) == (None, None, None)
    assert n.ts == NOW - 60
    empty = node_summary([], None, NOW)
    assert empty.stale and empty.level is UNKNOWN and empty.ts is None


def test_a_node_meter_is_its_power_only_while_fresh() -> None:
    assert node(cool_gpu(), meter=reading(power_w=9000)).power_w == 9000.0
    assert node(cool_gpu(), meter=reading(45, power_w=9000)).power_w is None


def test_a_hot_node_inlet_counts_in_the_node_level() -> None:
    n = node(cool_gpu(), meter=reading(temp_inlet_c=33))
    assert n.inlet_c == 33.0 and n.level is CRIT


def test_a_node_is_as_recent_as_its_newest_gpu_or_meter() -> None:
    n = node(cool_gpu(10), cool_gpu(4), meter=reading(2, power_w=1))
    assert n.ts == NOW - 2


# --- rack power ----------------------------------------------------------------------------


def _node(power_w: float | None, gpu_power_w: float | None, is_stale: bool = False) -> NodeSummary:
    return NodeSummary(
        gpu_power_w=gpu_power_w,
        power_w=power_w,
        max_temp_c=None,
        min_headroom_c=None,
        throttling_thermal=0,
        throttling_power=0,
        stale_gpus=0,
        inlet_c=None,
        ts=NOW,
        stale=is_stale,
        level=UNKNOWN if is_stale else OK,
    )


def test_rack_power_comes_from_the_pdu_while_it_is_fresh() -> None:
    nodes = [_node(9000, 5000)]
    assert rack_power(reading(power_w=12_000), nodes, NOW) == (12.0, "pdu")


def test_a_stale_pdu_gives_way_to_node_meters_when_every_fresh_node_has_one() -> None:
    nodes = [_node(9000, 5000), _node(8000, 4000), _node(None, 3000, is_stale=True)]
    assert rack_power(reading(60, power_w=12_000), nodes, NOW) == (17.0, "nodes")


def test_rack_power_falls_back_to_gpu_power_when_a_fresh_node_lacks_a_meter() -> None:
    nodes = [_node(9000, 5000), _node(None, 4000), _node(None, None)]
    assert rack_power(None, nodes, NOW) == (9.0, "gpus")


@pytest.mark.parametrize(
    ("gpus", "meter"),
    [
        ((cool_gpu(), cool_gpu(power_w=612.5)), reading(power_w=9000)),
        ((cool_gpu(), cool_gpu(120)), None),  # one stale GPU: its power does not count
        ((cool_gpu(120), cool_gpu(120)), reading(120, power_w=9000)),  # nothing fresh
        ((cool_gpu(120),), reading(power_w=7000)),  # only the node's meter is fresh
        ((reading(temp_gpu_c=50.0), cool_gpu()), None),  # a GPU without power
        ((), None),
    ],
)
def test_node_power_gives_the_power_figures_node_summary_gives(
    gpus: tuple[Reading, ...], meter: Reading | None
) -> None:
    # The alert engine sums rack power from node_power; the pages from node_summary.
    full = node(*gpus, meter=meter)
    light = node_power(gpus, meter, NOW)
    assert (light.power_w, light.gpu_power_w, light.stale) == (
        full.power_w,
        full.gpu_power_w,
        full.stale,
    )


def test_rack_power_is_none_without_any_fresh_source() -> None:
    assert rack_power(None, [], NOW) == (None, "none")
    assert rack_power(reading(60, power_w=1), [_node(9000, 5000, True)], NOW) == (None, "none")
    assert rack_power(None, [_node(None, None)], NOW) == (None, "none")


@pytest.mark.parametrize(
    ("kw", "budget_kw", "level"),
    [
        (89.9, 100, OK),
        (90, 100, WARN),
        (99.9, 100, WARN),
        (100, 100, CRIT),
        (130, 100, CRIT),
        (None, 100, UNKNOWN),
        (50, None, UNKNOWN),
        (50, 0, UNKNOWN),
    ],
)
def test_rack_power_warns_at_90_percent_of_budget_and_is_critical_at_100(
    kw: float | None, budget_kw: float | None, level: Level
) -> None:
    assert rack_power_level(kw, budget_kw) is level


# --- one rack ------------------------------------------------------------------------------


def test_a_throttled_rack_drawing_little_power_is_critical_not_calm() -> None:
    hot = node(cool_gpu(clock_event_reasons=nvml.HW_THERMAL_SLOWDOWN, power_w=300))
    r = rack_summary(reading(power_w=27_000), [hot], 100, NOW)
    assert r.power_pct == pytest.approx(27.0) and r.power_level is OK
    assert r.throttling_thermal == 1
    assert r.level is CRIT


def test_a_rack_over_budget_is_critical_even_when_every_gpu_is_cool() -> None:
    r = rack_summary(reading(power_w=101_000), [node(cool_gpu(clock_event_reasons=0))], 100, NOW)
    assert r.power_level is CRIT and r.level is CRIT


def test_a_rack_reports_its_power_source_headroom_and_hottest_gpu() -> None:
    nodes = [
        node(cool_gpu(temp_gpu_c=70), meter=reading(power_w=4000)),
        node(cool_gpu(temp_gpu_c=75), meter=reading(power_w=6000)),
    ]
    r = rack_summary(None, nodes, 20, NOW)
    assert (r.power_kw, r.power_source, r.power_pct) == (10.0, "nodes", 50.0)
    assert (r.min_headroom_c, r.max_temp_c) == (14.0, 75.0)
    assert r.level is OK and not r.stale and r.ts == NOW


def test_a_rack_with_a_silent_node_is_unknown_not_ok() -> None:
    r = rack_summary(reading(power_w=10_000), [node(cool_gpu()), node(cool_gpu(90))], 100, NOW)
    assert not r.stale and r.level is UNKNOWN


def test_a_rack_with_nothing_fresh_is_stale_and_unknown() -> None:
    r = rack_summary(reading(90, power_w=99_000), [node(cool_gpu(90))], 100, NOW)
    assert r.stale and r.level is UNKNOWN
    assert (r.power_kw, r.power_source) == (None, "none")


def test_a_leak_in_the_rack_is_critical() -> None:
    r = rack_summary(reading(power_w=10_000, leak=2), [node(cool_gpu())], 100, NOW)
    assert r.leak == 2 and r.level is CRIT


def test_rack_inlet_is_its_own_sensor_else_its_hottest_node_inlet() -> None:
    nodes = [node(cool_gpu(), meter=reading(temp_inlet_c=t)) for t in (24, 28)]
    assert rack_summary(reading(temp_inlet_c=25), nodes, 100, NOW).inlet_c == 25.0
    r = rack_summary(None, nodes, 100, NOW)
    assert r.inlet_c == 28.0 and r.level is WARN


def test_gpus_in_thermal_slowdown_are_critical_and_at_the_power_limit_are_not() -> None:
    from fleet import health

    assert health.throttling_level(0) == health.Level.OK
    assert health.throttling_level(3) == health.Level.CRIT
