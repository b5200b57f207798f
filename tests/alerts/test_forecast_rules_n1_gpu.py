"""The feed N+1 and GPU headroom time-to-limit rules through the engine (docs/rules.md, "Time
to limit"): a rack whose feeds together climb to their N+1 fires `rack-feeds-n1-forecast`,
a GPU warming towards its slowdown limit less the critical headroom fires
`gpu-headroom-forecast` with the crossing in its message, a GPU that holds steady never
fires, and a GPU's forecast while an incident of its rack is open joins that incident. The
rules read the forecasts the task fleet.forecasts stored: `tick` refreshes them at each
minute's start, as the beat would."""

from __future__ import annotations

import pytest

from fleet.alerts.models import AlertInstance, AlertRule
from fleet.health.racks import n_plus_one_kw
from fleet.models import GPU, PowerFeed, Rack
from fleet.words import utc_minute
from tests.support import forecast_rows
from tests.support.forecast_engine import START, demo_racks, firing, tick, title
from tests.support.forecast_rows import metered, seed_gpu_minutes, seed_minutes
from tests.support.latest import store_latest
from tests.support.series import ramp

pytestmark = pytest.mark.django_db

RULES = ("rack-feeds-n1-forecast", "gpu-headroom-forecast")


fresh_forecasts = forecast_rows.fresh_forecasts  # autouse


@pytest.fixture
def site() -> None:
    """Two racks of one node and one GPU each (slowdown 87 °C), only these rules enabled."""
    demo_racks(RULES)
    GPU.objects.update(slowdown_c=87.0)


def a01_gpu() -> GPU:
    return GPU.objects.get(node__rack__name="A01")


def gpu_warms(gpu: GPU, shape_start: float, per_h: float) -> None:
    shape = metered(ramp(shape_start, START, per_h), 0.1, seed=gpu.pk)
    seed_gpu_minutes(gpu.node_id, gpu.index, shape, START)


def test_feeds_climbing_to_their_n_plus_one_fire_with_the_crossing(site: None) -> None:
    rack = Rack.objects.get(name="A01")
    feeds = list(PowerFeed.objects.filter(rack=rack))
    n1 = n_plus_one_kw([f.available_kw for f in feeds])
    # together 5 kW under their N+1 now, rising 7.5 kW an hour: 40 minutes away
    each = 1e3 * (n1 - 5) / len(feeds)
    for f in feeds:
        shape = metered(ramp(each, START, 7.5e3 / len(feeds)), 100, seed=f.pk)
        seed_minutes("fw_feed_1m", "feed_id", f.pk, "power_w_mean", shape, START)
    for k in range(8):
        tick(k)
    inst = firing()["rack-feeds-n1-forecast"]
    assert inst.entity == str(rack.pk)
    crossing = AlertInstance.objects.get(pk=inst.pk).labels["crossing"]
    assert crossing in {utc_minute(START + (40 + d) * 60) for d in range(-4, 5)}
    assert title(inst).startswith(f"A01 feeds forecast to reach {round(n1, 1):g} kW, their N+1")


def test_a_warming_gpu_fires_with_the_crossing_and_a_steady_one_never(site: None) -> None:
    gpu = a01_gpu()
    gpu_warms(gpu, 82.0, 6.0)  # 84 °C (87 − 3) in 20 minutes: the rule's 30 are near
    steady = GPU.objects.get(node__rack__name="A02")
    gpu_warms(steady, 80.0, 0.0)
    for k in range(8):
        tick(k)
    (inst,) = AlertInstance.objects.filter(rule__key="gpu-headroom-forecast", state="firing")
    assert inst.entity == f"{gpu.node_id}:{gpu.index}"
    crossing = AlertInstance.objects.get(pk=inst.pk).labels["crossing"]
    assert crossing in {utc_minute(START + (20 + d) * 60) for d in range(-2, 3)}
    assert title(inst).startswith(f"{gpu.node.name} GPU 0 forecast to reach 84 °C at {crossing}")


def test_a_gpu_forecast_joins_the_incident_already_open_on_its_rack(site: None) -> None:
    gpu = a01_gpu()
    gpu_warms(gpu, 82.0, 6.0)
    AlertRule.objects.filter(key="feed-over-rating").update(enabled=True)
    feed = PowerFeed.objects.filter(rack__name="A01").first()
    assert feed is not None
    for k in range(8):
        # one of its rack's feeds over its rating all along: the rack's incident, open first
        store_latest("feed", (feed.pk,), START + 10 * k, power_w=feed.available_kw * 1.2e3)
        tick(k)
    now_firing = firing()
    incident = now_firing["feed-over-rating"].group
    assert incident is not None and incident.key.startswith(f"rack:{feed.rack_id}:")
    assert now_firing["gpu-headroom-forecast"].group == incident
