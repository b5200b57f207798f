"""The figures fleet.health computes for the alert rules' signals."""

from __future__ import annotations

from agents.protocol import reasons
from fleet import health

NOW = 1_000_000.0


def reading(**values: float) -> health.Reading:
    return health.Reading(values, dict.fromkeys(values, NOW - 1))


def test_rack_power_fraction_is_power_over_budget_and_unknown_without_a_budget() -> None:
    assert health.power_fraction(117.0, 130.0) == 0.9
    assert health.power_fraction(117.0, None) is None
    assert health.power_fraction(None, 130.0) is None


def test_feed_load_is_fresh_power_against_its_rating() -> None:
    assert health.feed_load_fraction(reading(power_w=45_000), 50.0, NOW) == 0.9
    stale = health.Reading({"power_w": 45_000}, {"power_w": NOW - 60})
    assert health.feed_load_fraction(stale, 50.0, NOW) is None


def test_supply_over_limit_is_signed() -> None:
    assert health.supply_over_limit_c(33.5, 32.0) == 1.5
    assert health.supply_over_limit_c(30.0, 32.0) == -2.0
    assert health.supply_over_limit_c(30.0, None) is None


def test_power_capped_clock_fraction_only_while_the_power_cap_bit_is_set() -> None:
    capped = reading(clock_event_reasons=reasons.SW_POWER_CAP, clock_sm_mhz=990)
    assert health.power_capped_clock_fraction(capped, 1980, NOW) == 0.5
    free = reading(clock_event_reasons=reasons.GPU_IDLE, clock_sm_mhz=990)
    assert health.power_capped_clock_fraction(free, 1980, NOW) is None
    assert health.power_capped_clock_fraction(capped, None, NOW) is None


def test_silent_intervals_counts_intervals_since_the_last_batch() -> None:
    assert health.silent_intervals(NOW - 3, NOW, 1.0) == 3.0
    assert health.silent_intervals(None, NOW, 1.0) is None


def test_field_lag_names_the_field_that_stopped_while_the_rest_arrive() -> None:
    r = health.Reading(
        {"temp_gpu_c": 60, "power_w": 500}, {"temp_gpu_c": NOW - 1, "power_w": NOW - 91}
    )
    assert health.field_lag(r, NOW) == ("power_w", 90.0)


def test_field_lag_is_unknown_when_the_whole_entity_is_stale() -> None:
    r = health.Reading({"temp_gpu_c": 60}, {"temp_gpu_c": NOW - 600})
    assert health.field_lag(r, NOW) is None


def test_a_gpu_is_missing_only_while_its_node_still_reports() -> None:
    node = reading(cpu_pct=10)
    assert health.gpu_missing(health.EMPTY, node, NOW) is True
    assert health.gpu_missing(reading(temp_gpu_c=60), node, NOW) is False
    assert health.gpu_missing(health.EMPTY, health.EMPTY, NOW) is None
