"""The engine's derived signals beyond the raw gauges: silent sources, lagging fields,
missing GPUs, event counts, feed load, power-capped clocks and per-site PUE targets."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from fleet.alerts.engine import evaluate
from fleet.alerts.evaluate_state import Snapshot, values_for
from fleet.alerts.models import AlertInstance, AlertRule
from fleet.alerts.signals import get
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import Event, Node, PowerFeed, Site
from tests.support import alert_engine
from tests.support.alert_engine import T0, signal_rule
from tests.support.latest import store_latest as store
from tests.support.sources import source_token

pytestmark = pytest.mark.django_db

only_our_rules = alert_engine.our_rules_only  # autouse


@pytest.fixture
def node() -> Node:
    seed_demo_site("demo", (replace(DEMO_RACKS[0], nodes=2),), gpus_per_node=2)
    return Node.objects.order_by("id").first()  # type: ignore[return-value]


rule = signal_rule


def firing() -> set[str]:
    return set(AlertInstance.objects.filter(state="firing").values_list("entity", flat=True))


def token(n: Node, last_seen: float | None) -> None:
    source_token(n.source, "node", n.rack.hall.site, last_seen)


def test_a_node_agent_silent_for_three_intervals_fires(node: Node) -> None:
    rule("node", "agent_silent_intervals", 3, interval_s=10.0)
    token(node, T0 - 35)
    evaluate(T0)
    inst = AlertInstance.objects.get()
    assert inst.entity == str(node.id) and inst.state == "firing" and inst.value == 3.5


def test_a_chatty_node_agent_or_one_never_heard_from_does_not_fire(node: Node) -> None:
    rule("node", "agent_silent_intervals", 3)  # default interval_s: 1 s
    token(node, T0 - 1.5)
    token(Node.objects.exclude(pk=node.pk).get(), None)  # enrolled, never sent
    evaluate(T0)
    assert not AlertInstance.objects.exists()


def test_a_field_that_stopped_arriving_while_its_node_reports_fires_metric_lag(
    node: Node,
) -> None:
    rule("node", "metric_lag_s", 120)
    store("node", (node.id,), T0 - 200, temp_inlet_c=25.0, cpu_pct=10.0)
    store("node", (node.id,), T0, cpu_pct=12.0)  # the inlet sensor stopped 200 s ago
    evaluate(T0)
    inst = AlertInstance.objects.get()
    assert inst.entity == str(node.id) and inst.value == pytest.approx(200.0)


def test_metric_lag_does_not_fire_for_fields_in_step_or_outside_its_metrics(
    node: Node,
) -> None:
    rule("node", "metric_lag_s", 120, metrics=["cpu_pct"])
    other = Node.objects.exclude(pk=node.pk).get()
    store("node", (node.id,), T0 - 200, temp_inlet_c=25.0, cpu_pct=10.0)
    store("node", (node.id,), T0, cpu_pct=12.0)  # inlet lags, but the rule watches cpu_pct
    store("node", (other.id,), T0, temp_inlet_c=25.0, cpu_pct=10.0)
    evaluate(T0)
    assert not AlertInstance.objects.exists()


def test_a_gpu_with_nothing_fresh_while_its_node_reports_is_missing(node: Node) -> None:
    rule("gpu", "gpu_missing", 1)
    store("gpu", (node.id, 0), T0, temp_gpu_c=60.0)  # GPU 1 of 2 sends nothing
    evaluate(T0)
    assert firing() == {f"{node.id}:1"}


def test_gpus_of_a_silent_node_are_not_missing(node: Node) -> None:
    rule("gpu", "gpu_missing", 1)
    store("gpu", (node.id, 0), T0 - 300, temp_gpu_c=60.0)  # the whole node went quiet
    evaluate(T0)
    assert not AlertInstance.objects.exists()


def event(n: Node, gpu: int, kind: str, at: float, code: int | None = None) -> None:
    seq = Event.objects.count()
    Event.objects.create(
        source=n.source, seq=seq, pos=0, ts=at, node=n, gpu_index=gpu, kind=kind, code=code
    )


def test_an_xid_79_fires_the_fatal_xid_rule_for_that_gpu_and_resolves_after_the_window(
    node: Node,
) -> None:
    rule("gpu", "xid_events", 1, codes=[48, 74, 79, 95, 119, 120, 140], window_s=600)
    event(node, 1, "xid", T0 - 10, code=79)
    evaluate(T0)
    assert firing() == {f"{node.id}:1"}
    evaluate(T0 + 600)  # the event has left the window
    assert firing() == set()
    assert AlertInstance.objects.get().state == "resolved"


def test_an_xid_13_or_an_old_xid_79_does_not_fire_the_fatal_xid_rule(node: Node) -> None:
    rule("gpu", "xid_events", 1)  # default codes: the always-fatal ones
    event(node, 0, "xid", T0 - 10, code=13)
    event(node, 1, "xid", T0 - 700, code=79)  # before the 600 s window
    event(node, 1, "ecc_dbe", T0 - 10)  # another kind
    evaluate(T0)
    assert not AlertInstance.objects.exists()


def test_ecc_dbe_and_gpu_lost_events_fire_only_their_own_rules(node: Node) -> None:
    rule("gpu", "ecc_dbe_events", 1)
    rule("gpu", "gpu_lost_events", 2)
    event(node, 0, "ecc_dbe", T0 - 5)
    event(node, 1, "gpu_lost", T0 - 5)  # one, under this rule's threshold of 2
    evaluate(T0)
    assert set(AlertInstance.objects.values_list("rule__signal", "entity")) == {
        ("ecc_dbe_events", f"{node.id}:0")
    }


def test_an_event_rule_counts_with_one_query_however_many_gpus(
    node: Node, django_assert_max_num_queries: Any
) -> None:
    spec = get("gpu", "xid_events")
    assert spec is not None
    snap = Snapshot(T0)
    values_for(get("gpu", "gpu_missing"), snap, {})  # type: ignore[arg-type]
    with django_assert_max_num_queries(1):
        values = values_for(spec, snap, {"codes": [79]})
    assert values == dict.fromkeys(values, 0.0) and len(values) == 4


def test_a_feed_over_its_continuous_rating_fires_and_one_under_it_does_not(node: Node) -> None:
    rule("feed", "feed_load_fraction", 1.0, cmp="gt")
    over, under = PowerFeed.objects.filter(rack=node.rack).order_by("name")[:2]
    store("feed", (over.pk,), T0, power_w=over.available_kw * 1000 * 1.1)
    store("feed", (under.pk,), T0, power_w=under.available_kw * 1000 * 0.5)
    evaluate(T0)
    inst = AlertInstance.objects.get()
    assert inst.entity == str(over.pk) and inst.value == pytest.approx(1.1)


def test_a_power_capped_gpu_held_far_under_its_max_clock_fires(node: Node) -> None:
    rule("gpu", "power_capped_clock_fraction", 0.7, cmp="lt", clock_max_mhz=2000.0)
    store("gpu", (node.id, 0), T0, clock_event_reasons=0x4, clock_sm_mhz=1000.0)
    evaluate(T0)
    inst = AlertInstance.objects.get()
    assert inst.entity == f"{node.id}:0" and inst.value == pytest.approx(0.5)


def test_a_capped_gpu_near_its_max_or_an_uncapped_slow_one_does_not_fire(node: Node) -> None:
    rule("gpu", "power_capped_clock_fraction", 0.7, cmp="lt", clock_max_mhz=2000.0)
    store("gpu", (node.id, 0), T0, clock_event_reasons=0x4, clock_sm_mhz=1900.0)
    store("gpu", (node.id, 1), T0, clock_event_reasons=0x0, clock_sm_mhz=300.0)  # idle
    evaluate(T0)
    assert not AlertInstance.objects.exists()


def test_pue_is_judged_against_each_sites_own_target_with_the_rules_band() -> None:
    strict = Site.objects.create(slug="lon1", name="London")
    default = Site.objects.create(slug="mad1", name="Madrid")
    rule("site", "pue", 1.5, cmp="gt", site_targets={"lon1": 1.3})
    AlertRule.objects.filter(signal="pue").update(clear_threshold=1.45)  # band 0.05
    for site in (strict, default):
        store("facility", (site.pk,), T0, total_power_w=1400.0, it_power_w=1000.0, pue_category=1)
    evaluate(T0)
    assert firing() == {str(strict.pk)}  # 1.4 > 1.3; Madrid's 1.4 is under the default 1.5
    store("facility", (strict.pk,), T0 + 10, total_power_w=1270.0, it_power_w=1000.0)
    evaluate(T0 + 10)  # 1.27: under the target, inside the band (clears under 1.25)
    assert firing() == {str(strict.pk)}
    store("facility", (strict.pk,), T0 + 20, total_power_w=1240.0, it_power_w=1000.0)
    evaluate(T0 + 20)
    assert firing() == set()


def test_a_rack_near_its_budget_fires_whether_the_pdu_or_its_gpus_report_the_power(
    node: Node,
) -> None:
    rule("rack", "rack_power_fraction", 0.9)
    rack = node.rack
    store("rack", (rack.pk,), T0, power_w=rack.power_budget_kw * 1000 * 0.95)  # at the PDU
    evaluate(T0)
    assert firing() == {str(rack.pk)}
    AlertInstance.objects.all().delete()
    AlertRule.objects.filter(signal="rack_power_fraction").delete()
    rule("rack", "rack_power_fraction", 0.9)
    # a minute later the PDU reading is stale: the GPUs of its nodes (read once, in the
    # engine's snapshot) count instead
    per_gpu = rack.power_budget_kw * 1000 * 0.95 / (2 * 2)
    for n in Node.objects.filter(rack=rack):
        for gpu in (0, 1):
            store("gpu", (n.pk, gpu), T0 + 60, gpu=gpu, power_w=per_gpu, temp_gpu_c=60.0)
    evaluate(T0 + 60)
    assert firing() == {str(rack.pk)}
