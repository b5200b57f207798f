"""The time-to-limit rules through the engine (docs/rules.md, "Time to limit"): a rack whose
draw ramps towards its budget fires `rack-power-forecast` with the crossing's time in its
message, a CDU whose supply climbs to its limit fires `loop-supply-forecast`, a flat rack
never fires, and a rack forecast while an incident of that rack is open joins that
incident instead of opening one of its own. The rules read the forecasts the task
fleet.forecasts stored: `tick` refreshes them at each minute's start, as the beat would."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fleet.alerts.models import AlertInstance, AlertRule
from fleet.models import CoolingLoop, PowerFeed, Rack
from fleet.words import utc_minute
from tests.support import forecast_rows
from tests.support.forecast_engine import START, demo_racks, firing, tick, title
from tests.support.forecast_rows import metered, seed_minutes
from tests.support.latest import store_latest
from tests.support.series import ramp

pytestmark = pytest.mark.django_db

RULES = ("rack-power-forecast", "loop-supply-forecast")


fresh_forecasts = forecast_rows.fresh_forecasts  # autouse


@pytest.fixture
def site() -> None:
    """Two liquid racks of 130 kW on CDU-1 (W32: 32 °C), only the forecast rules enabled."""
    demo_racks(RULES)
    CoolingLoop.objects.filter(name="CDU-1").update(liquid_class="W32")


def rack_draws(name: str, shape: Callable[[float], float]) -> Rack:
    rack = Rack.objects.get(name=name)
    seed_minutes("fw_rack_1m", "rack_id", rack.pk, "power_w_mean", shape, START)
    return rack


def test_a_ramping_rack_fires_with_the_crossing_time_in_its_message(site: None) -> None:
    # 130 kW budget: 125 kW now, 7.5 kW an hour, reaches it 40 minutes from now
    rack_draws("A01", metered(ramp(125e3, START, 7.5e3), 300))
    for k in range(8):  # 10 s ticks over 70 s: the rule's 60 s for-duration
        tick(k)
    inst = firing()["rack-power-forecast"]
    crossing = AlertInstance.objects.get(pk=inst.pk).labels["crossing"]
    true_at = START + 40 * 60
    # the crossing named is within 10 % of the true 40 minutes (to the minute it names)
    assert crossing in {utc_minute(true_at + d * 60) for d in range(-4, 5)}
    assert title(inst).startswith(f"A01 forecast to reach 130 kW at {crossing} (in ~")


def test_a_cdu_supply_climbing_to_its_class_limit_fires(site: None) -> None:
    loop = CoolingLoop.objects.get(name="CDU-1")
    climbing = metered(ramp(31.0, START, 3.0), 0.03)
    seed_minutes("fw_loop_1m", "loop_id", loop.pk, "supply_c_mean", climbing, START)
    for k in range(8):
        tick(k)
    inst = firing()["loop-supply-forecast"]
    crossing = AlertInstance.objects.get(pk=inst.pk).labels["crossing"]
    # 31 °C now, 3 °C an hour: 32 °C in 20 minutes
    assert crossing in {utc_minute(START + (20 + d) * 60) for d in range(-2, 3)}
    assert f"CDU-1: supply forecast to reach 32 °C at {crossing}" in title(inst)


def test_a_flat_rack_never_fires(site: None) -> None:
    rack_draws("A01", metered(lambda t: 125e3, 300))  # 5 kW under its budget, going nowhere
    for k in range(30):  # five minutes of ticks
        tick(k)
    assert not AlertInstance.objects.exists()


def test_a_forecast_joins_the_incident_already_open_on_its_rack(site: None) -> None:
    rack = rack_draws("A01", metered(ramp(125e3, START, 7.5e3), 300))
    AlertRule.objects.filter(key="feed-over-rating").update(enabled=True)
    feed = PowerFeed.objects.filter(rack=rack).first()
    assert feed is not None
    for k in range(8):
        # one of its feeds over its rating all along: the rack's incident, open first
        store_latest("feed", (feed.pk,), START + 10 * k, power_w=feed.available_kw * 1.2e3)
        tick(k)
    now_firing = firing()
    incident = now_firing["feed-over-rating"].group
    assert incident is not None and incident.key == f"rack:{rack.pk}:feed-over-rating"
    assert now_firing["rack-power-forecast"].group == incident
