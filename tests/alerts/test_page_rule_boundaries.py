"""Every level a page shows can alert, at the same boundary: one table of cases (a value at,
just above and just below each threshold) run through the page's own function (fleet/health)
and through the installed built-in rules (`AlertRule.breached` on the value the engine
computes for that signal); the level the page shows must be the worst severity the rules
breach — no rule breached is "ok"."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pytest

from agents.protocol import reasons as nvml
from fleet import health
from fleet.alerts.engine import evaluate
from fleet.alerts.evaluate_state import clock_event_flag
from fleet.alerts.models import AlertInstance, AlertRule
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.health import Level
from fleet.health.thresholds import (
    FLOW_CRIT_FRACTION,
    FLOW_STOPPED_LPM,
    FLOW_WARN_FRACTION,
    HEADROOM_CRIT_C,
    HEADROOM_WARN_C,
    INLET_ALLOWABLE_A1_MAX_C,
    INLET_RECOMMENDED_MAX_C,
    LEAK_CRIT,
    LEAK_WARN,
    RACK_POWER_CRIT_FRACTION,
    RACK_POWER_WARN_FRACTION,
    SUPPLY_WARN_MARGIN_C,
)
from fleet.models import Node
from tests.support.latest import store_latest

pytestmark = pytest.mark.django_db

NOW = 1_800_000_000.0
SLOWDOWN_C, MEM_MAX_C = 89.0, 95.0  # an H100/H200's own limits
LIMITS = health.GpuLimits(slowdown_c=SLOWDOWN_C, mem_max_c=MEM_MAX_C)
SUPPLY_LIMIT_C = 45.0  # W45
RATED_LPM = 1000.0
BUDGET_KW = 100.0
EPS = 0.01
SEVERITY_LEVEL = {"warning": Level.WARN, "critical": Level.CRIT}

SignalValues = Mapping[str, float | None]


def _reading(**values: float) -> health.Reading:
    return health.Reading(values, dict.fromkeys(values, NOW))


@dataclass(frozen=True)
class Family:
    """A page level and the built-in rules at its boundaries: `page` is what the page shows
    for an input, `signals` what the engine computes from the same input."""

    name: str
    rules: tuple[str, ...]
    page: Callable[[float], Level]
    signals: Callable[[float], SignalValues]
    boundaries: tuple[float, ...]
    integer: bool = False
    exact: bool = False  # the boundaries are the cases (bit masks: no "just above")

    def cases(self) -> list[float]:
        if self.exact:
            return list(self.boundaries)
        if self.integer:
            return sorted({v for b in self.boundaries for v in (b - 1, b, b + 1)})
        return sorted({v for b in self.boundaries for v in (b - EPS, b, b + EPS)})


def _gpu_headroom(headroom_c: float) -> health.Headroom:
    reading = _reading(temp_gpu_c=SLOWDOWN_C - headroom_c, temp_mem_c=40.0)
    return health.gpu_headroom(reading, LIMITS, NOW)


def _hbm_headroom(headroom_c: float) -> health.Headroom:
    reading = _reading(temp_gpu_c=40.0, temp_mem_c=MEM_MAX_C - headroom_c)
    return health.gpu_headroom(reading, LIMITS, NOW)


def _loop(metric: str, value: float) -> health.LoopSummary:
    return health.loop_summary(
        _reading(**{metric: value}),
        NOW,
        supply_limit_c=SUPPLY_LIMIT_C,
        rated_flow_lpm=RATED_LPM,
    )


def _flow(flow_lpm: float) -> SignalValues:
    return {"flow_lpm": flow_lpm, "flow_fraction": _loop("flow_lpm", flow_lpm).flow_frac}


def _supply(supply_c: float) -> SignalValues:
    summary = _loop("supply_c", supply_c)
    return {"supply_over_limit_c": health.supply_over_limit_c(summary.supply_c, SUPPLY_LIMIT_C)}


THROTTLE_FLAGS = (
    "hw_thermal_slowdown",
    "sw_thermal_slowdown",
    "hw_slowdown_unexplained",
    "hw_power_brake",
)

FAMILIES: tuple[Family, ...] = (
    Family(
        "GPU headroom to slowdown",
        ("gpu-headroom-low", "gpu-headroom-critical"),
        lambda h: _gpu_headroom(h).level,
        lambda h: {"headroom_slowdown_c": _gpu_headroom(h).slowdown_c},
        (HEADROOM_WARN_C, HEADROOM_CRIT_C),
    ),
    Family(
        "HBM headroom to its max",
        ("gpu-hbm-headroom-low", "gpu-hbm-headroom-critical"),
        lambda h: _hbm_headroom(h).level,
        lambda h: {"headroom_hbm_c": _hbm_headroom(h).mem_max_c},
        (HEADROOM_WARN_C, HEADROOM_CRIT_C),
    ),
    *(
        Family(
            f"{scope} inlet air",
            (f"{scope}-inlet-recommended", f"{scope}-inlet-allowable"),
            health.inlet_level,
            lambda t: {"temp_inlet_c": t},
            (INLET_RECOMMENDED_MAX_C, INLET_ALLOWABLE_A1_MAX_C),
        )
        for scope in ("node", "rack")
    ),
    Family(
        "rack power against budget",
        ("rack-power-90", "rack-power-100"),
        lambda kw: health.rack_power_level(kw, BUDGET_KW),
        lambda kw: {"rack_power_fraction": health.power_fraction(kw, BUDGET_KW)},
        (RACK_POWER_WARN_FRACTION * BUDGET_KW, RACK_POWER_CRIT_FRACTION * BUDGET_KW),
    ),
    Family(
        "loop supply against its class limit",
        ("loop-supply-near-limit", "loop-supply-over-limit"),
        lambda s: _loop("supply_c", s).level,
        _supply,
        (SUPPLY_LIMIT_C - SUPPLY_WARN_MARGIN_C, SUPPLY_LIMIT_C),
    ),
    Family(
        "loop flow against its rating",
        ("loop-flow-low", "loop-flow-collapse", "loop-flow-stopped"),
        lambda f: _loop("flow_lpm", f).level,
        _flow,
        (FLOW_WARN_FRACTION * RATED_LPM, FLOW_CRIT_FRACTION * RATED_LPM, FLOW_STOPPED_LPM),
    ),
    Family(
        "loop flow without a rating",
        ("loop-flow-stopped",),
        lambda f: health.flow_level(f, None),
        lambda f: {"flow_lpm": f, "flow_fraction": None},
        (FLOW_STOPPED_LPM,),
    ),
    Family(
        "failed pumps",
        ("loop-pump-failed",),
        lambda n: _loop("pumps_failed", n).level,
        lambda n: {"pumps_failed": n},
        (1,),
        integer=True,
    ),
    Family(
        "pumps running",
        ("loop-no-pump-running",),
        lambda n: _loop("pumps_running", n).level,
        lambda n: {"pumps_running": n},
        (1,),
        integer=True,
    ),
    Family(
        "loop reservoir",
        ("loop-reservoir-low",),
        lambda n: _loop("reservoir_low", n).level,
        lambda n: {"reservoir_low": n},
        (1,),
        integer=True,
    ),
    Family(
        "loop leak",
        ("loop-leak-warning", "loop-leak"),
        lambda n: _loop("leak", n).level,
        lambda n: {"leak": n},
        (LEAK_WARN, LEAK_CRIT),
        integer=True,
    ),
    Family(
        "rack leak",
        ("rack-leak-warning", "rack-leak"),
        health.leak_level,
        lambda n: {"leak": n},
        (LEAK_WARN, LEAK_CRIT),
        integer=True,
    ),
    Family(
        "GPU clock-event reasons",
        (
            "gpu-hw-thermal-slowdown",
            "gpu-sw-thermal-slowdown",
            "gpu-hw-slowdown",
            "gpu-hw-power-brake",
        ),
        lambda mask: health.throttle_state(int(mask)).level,
        lambda mask: {name: clock_event_flag(name, int(mask)) for name in THROTTLE_FLAGS},
        # Each bit alone and with its neighbours: idle, power cap, HW slowdown alone, with
        # power cap, with HW thermal (the simulator's pair), with the power brake.
        tuple(
            float(m)
            for m in (
                0,
                nvml.GPU_IDLE,
                nvml.SW_POWER_CAP,
                nvml.HW_SLOWDOWN,
                nvml.HW_SLOWDOWN | nvml.SW_POWER_CAP,
                nvml.SW_THERMAL_SLOWDOWN,
                nvml.HW_THERMAL_SLOWDOWN,
                nvml.HW_THERMAL_SLOWDOWN | nvml.HW_SLOWDOWN,
                nvml.HW_POWER_BRAKE_SLOWDOWN,
                nvml.HW_POWER_BRAKE_SLOWDOWN | nvml.HW_SLOWDOWN,
            )
        ),
        exact=True,
    ),
)

CASES = [
    pytest.param(family, value, id=f"{family.name} {value:g}")
    for family in FAMILIES
    for value in family.cases()
]


def level_from_rules(rules: list[AlertRule], values: SignalValues) -> Level:
    """The worst severity of the rules the values breach; none breached is ok."""
    breached = [
        SEVERITY_LEVEL[rule.severity]
        for rule in rules
        if (value := values[rule.signal]) is not None and rule.breached(value)
    ]
    return health.worst(*breached) if breached else Level.OK


@pytest.mark.parametrize(("family", "value"), CASES)
def test_the_page_and_the_rules_show_the_same_level(family: Family, value: float) -> None:
    rules = [AlertRule.objects.get(key=key, builtin=True) for key in family.rules]
    assert all(rule.enabled for rule in rules)
    page = family.page(value)
    alerts = level_from_rules(rules, family.signals(value))
    assert page == alerts, f"{family.name} at {value:g}: page {page}, rules {alerts}"


def test_the_table_covers_every_rule_severity_each_family_names() -> None:
    """Each family's rules reach its warn and crit levels somewhere in the table (a case
    list that never crosses a boundary would agree trivially)."""
    for family in FAMILIES:
        seen = {family.page(v) for v in family.cases()}
        rules = AlertRule.objects.filter(key__in=family.rules)
        wanted = {SEVERITY_LEVEL[r.severity] for r in rules} | {Level.OK}
        assert wanted <= seen, (family.name, wanted, seen)


def test_a_gpu_reporting_only_hw_slowdown_fires_and_one_in_hw_thermal_fires_that_rule_alone() -> (
    None
):
    seed_demo_site("demo", (DEMO_RACKS[0],), gpus_per_node=2)
    node = Node.objects.order_by("id").first()
    assert node is not None
    now = time.time()
    rule = AlertRule.objects.get(key="gpu-hw-slowdown")
    hot_gpu = (node.id, 0)
    slowed_gpu = (node.id, 1)
    for at in (now - 40, now):
        store_latest("node", (node.id,), at, power_w=5000.0)
        store_latest("gpu", slowed_gpu, at, clock_event_reasons=nvml.HW_SLOWDOWN)
        store_latest(
            "gpu", hot_gpu, at, clock_event_reasons=nvml.HW_SLOWDOWN | nvml.HW_THERMAL_SLOWDOWN
        )
        evaluate(at)
    firing = AlertInstance.objects.filter(state="firing")
    by_rule = {(i.rule.key, i.entity) for i in firing.select_related("rule")}
    assert ("gpu-hw-slowdown", f"{node.id}:1") in by_rule
    assert ("gpu-hw-thermal-slowdown", f"{node.id}:0") in by_rule
    assert ("gpu-hw-slowdown", f"{node.id}:0") not in by_rule  # its cause has its own rule
    assert rule.severity == "critical" and rule.for_duration.total_seconds() == 30
