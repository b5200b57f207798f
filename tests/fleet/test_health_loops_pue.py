"""fleet.health for liquid loops (CDUs) and the facility's PUE: the figures and levels the
loop and site pages, alerts and exporter share.

Pure unit tests: no database, no Django.
"""

from __future__ import annotations

import pytest

from fleet.health import (
    Level,
    Reading,
    facility_pue,
    flow_level,
    loop_summary,
    pue,
    pue_category,
    supply_level,
)
from tests.support.health_readings import CRIT, NOW, OK, UNKNOWN, WARN, reading

# --- liquid loops --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("supply_c", "limit_c", "level"),
    [
        (28, 32, OK),
        (30, 32, OK),
        (30.5, 32, WARN),
        (32, 32, WARN),
        (32.5, 32, CRIT),
        (40, None, UNKNOWN),
        (None, 32, UNKNOWN),
    ],
)
def test_loop_supply_warns_near_its_w_class_limit_and_is_critical_above_it(
    supply_c: float | None, limit_c: float | None, level: Level
) -> None:
    assert supply_level(supply_c, limit_c) is level


@pytest.mark.parametrize(
    ("flow", "rated", "level"),
    [
        (400, 400, OK),
        (120, 400, OK),  # variable-speed pumps at partial load: normal
        (40, 400, OK),
        (39, 400, WARN),
        (8, 400, WARN),
        (7, 400, CRIT),
        (0.5, None, CRIT),
        (50, None, OK),
        (0, 400, CRIT),
        (None, 400, UNKNOWN),
    ],
)
def test_loop_flow_collapse_is_judged_against_its_rated_flow(
    flow: float | None, rated: float | None, level: Level
) -> None:
    assert flow_level(flow, rated) is level


def test_a_healthy_loop_reports_its_figures() -> None:
    lp = loop_summary(
        reading(supply_c=28, return_c=38, flow_lpm=380, pumps_failed=0, leak=0),
        NOW,
        supply_limit_c=32,
        rated_flow_lpm=400,
    )
    assert (lp.supply_c, lp.return_c, lp.delta_c) == (28.0, 38.0, 10.0)
    assert lp.flow_frac == pytest.approx(0.95)
    assert (lp.pumps_failed, lp.leak, lp.ts) == (0, 0, NOW)
    assert lp.level is OK and not lp.stale


def test_a_reported_delta_t_is_kept() -> None:
    assert loop_summary(reading(supply_c=28, return_c=38, delta_c=9.5), NOW).delta_c == 9.5


def test_loop_supply_above_its_w_class_limit_is_critical() -> None:
    lp = loop_summary(reading(supply_c=36, flow_lpm=400), NOW, supply_limit_c=32)
    assert lp.level is CRIT


def test_a_failed_pump_warns_and_no_running_pump_is_critical() -> None:
    assert loop_summary(reading(pumps_failed=1, pumps_running=2), NOW).level is WARN
    assert loop_summary(reading(pumps_failed=3, pumps_running=0), NOW).level is CRIT


def test_a_loop_leak_or_low_reservoir_raises_its_level() -> None:
    assert loop_summary(reading(flow_lpm=400, leak=1), NOW).level is WARN
    assert loop_summary(reading(flow_lpm=400, leak=2), NOW).level is CRIT
    assert loop_summary(reading(flow_lpm=400, reservoir_low=1), NOW).level is WARN


def test_a_loop_with_nothing_to_judge_is_unknown_not_ok() -> None:
    lp = loop_summary(reading(supply_c=28, return_c=38), NOW)
    assert lp.delta_c == 10.0 and lp.flow_frac is None and lp.level is UNKNOWN


def test_a_stale_loop_is_unknown_and_shows_no_live_figures() -> None:
    lp = loop_summary(reading(60, supply_c=40, flow_lpm=0, leak=2), NOW, supply_limit_c=32)
    assert lp.stale and lp.level is UNKNOWN
    assert (lp.supply_c, lp.flow_lpm, lp.leak) == (None, None, None)


# --- PUE -----------------------------------------------------------------------------------


def test_pue_is_total_over_it_power() -> None:
    assert pue(1.3e6, 1.0e6) == pytest.approx(1.3)
    assert pue(None, 1.0e6) is None and pue(1.3e6, None) is None and pue(1.3e6, 0) is None


def test_pue_category_names_where_it_power_was_measured() -> None:
    assert pue_category(2) == "PDU output"
    assert pue_category(3) == "IT equipment input"
    assert pue_category(None) is None and pue_category(7) is None


def test_facility_pue_is_the_ratio_of_fresh_powers_with_its_category() -> None:
    r = reading(total_power_w=1.3e6, it_power_w=1.0e6, pue=9.0, pue_category=2)
    value, category = facility_pue(r, NOW)
    assert value == pytest.approx(1.3) and category == 2


def test_facility_pue_falls_back_to_the_reported_figure() -> None:
    assert facility_pue(reading(pue=1.42, pue_category=1), NOW) == (1.42, 1)


def test_a_pue_without_its_category_is_withheld() -> None:
    assert facility_pue(reading(total_power_w=1.3e6, it_power_w=1e6), NOW) == (None, None)


def test_stale_facility_power_gives_no_pue() -> None:
    r = Reading(
        {"total_power_w": 1.3e6, "it_power_w": 1e6, "pue_category": 2},
        {"total_power_w": NOW - 120, "it_power_w": NOW - 120, "pue_category": NOW},
    )
    assert facility_pue(r, NOW) == (None, 2)
