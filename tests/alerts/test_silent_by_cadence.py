"""The "agent silent" and "metric stopped" signals count in each source's own batch
interval (fleet/health/cadence.py): sources at 1 s, 5 s and 15 s are each judged right,
a batch interval counts rather than the sampling one, an agent that declares nothing gets
its kind's default, and a rule's `interval_s` overrides them all."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from fleet.alerts.engine import evaluate
from fleet.alerts.models import AlertInstance
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import Node, Site
from tests.support import alert_engine
from tests.support.alert_engine import T0, signal_rule
from tests.support.latest import store_latest
from tests.support.sources import source_token

pytestmark = pytest.mark.django_db

only_our_rules = alert_engine.our_rules_only  # autouse


@pytest.fixture
def nodes() -> list[Node]:
    seed_demo_site("demo", (replace(DEMO_RACKS[0], nodes=3),), gpus_per_node=1)
    return list(Node.objects.order_by("name"))


rule = signal_rule


def token(
    source: str,
    kind: str,
    last_seen: float,
    sample_s: float | None = None,
    batch_s: float | None = None,
    fields_s: dict[str, float] | None = None,
) -> None:
    source_token(
        source,
        kind,
        Site.objects.get(),
        last_seen,
        sample_interval_s=sample_s,
        batch_interval_s=batch_s,
        field_intervals_s=fields_s or {},
    )


def firing() -> dict[str, float | None]:
    rows = AlertInstance.objects.filter(state="firing").values_list("entity", "value")
    return {entity: value for entity, value in rows}


@pytest.mark.parametrize(
    ("silent_s", "silent"),
    [
        (2.5, set()),  # every source is inside 3 of its intervals
        (4.0, {1.0}),  # the 1 s node has missed 3 batches; 5 s and 15 s have not
        (16.0, {1.0, 5.0}),
        (46.0, {1.0, 5.0, 15.0}),
    ],
)
def test_node_agents_at_1_5_and_15_s_are_each_silent_after_three_of_their_own_batches(
    nodes: list[Node], silent_s: float, silent: set[float]
) -> None:
    rule("node", "agent_silent_intervals", 3)
    intervals = (1.0, 5.0, 15.0)
    for node, interval in zip(nodes, intervals, strict=True):
        token(node.source, "node", T0 - silent_s, interval, interval)
    evaluate(T0)
    by_node = {str(node.id): interval for node, interval in zip(nodes, intervals, strict=True)}
    fired = firing()
    assert {by_node[entity] for entity in fired} == silent
    for entity, value in fired.items():
        assert value == pytest.approx(silent_s / by_node[entity])


def test_a_facility_agent_sending_every_5_s_is_not_silent_between_batches(
    nodes: list[Node],
) -> None:
    """The issue's false alarm: the site's facility agent sends every 5 s."""
    rule("site", "agent_silent_intervals", 3)
    token("site:demo", "site", T0 - 4.9, 5.0, 5.0)
    evaluate(T0)
    assert firing() == {}
    evaluate(T0 + 11)  # 15.9 s since its last batch: three batches missed
    assert list(firing().values()) == [pytest.approx(15.9 / 5.0)]


def test_the_batch_interval_counts_not_the_sampling_interval(nodes: list[Node]) -> None:
    rule("node", "agent_silent_intervals", 3)
    token(nodes[0].source, "node", T0 - 8.0, sample_s=1.0, batch_s=5.0)  # 1.6 batches
    token(nodes[1].source, "node", T0 - 8.0, sample_s=1.0, batch_s=1.0)  # 8 batches
    evaluate(T0)
    assert set(firing()) == {str(nodes[1].id)}


def test_an_agent_that_declares_nothing_is_judged_by_its_kinds_default(
    nodes: list[Node],
) -> None:
    rule("node", "agent_silent_intervals", 3)
    rule("site", "agent_silent_intervals", 3)
    token(nodes[0].source, "node", T0 - 4.0)  # a node agent's default: 1 s
    token("site:demo", "site", T0 - 12.0)  # a facility agent's default: 10 s
    evaluate(T0)
    assert firing() == {str(nodes[0].id): pytest.approx(4.0)}


def test_a_rules_interval_s_overrides_every_sources_own(nodes: list[Node]) -> None:
    rule("site", "agent_silent_intervals", 3, interval_s=1.0)
    token("site:demo", "site", T0 - 4.0, 5.0, 5.0)
    evaluate(T0)
    assert list(firing().values()) == [pytest.approx(4.0)]


def store(key: tuple[int, ...], at: float, **values: Any) -> None:
    store_latest("node", key, at, **values)


def test_a_field_lagging_within_its_sources_pace_has_not_stopped(nodes: list[Node]) -> None:
    """A node whose data comes every 60 s: a field one sample behind (60 s) and one three
    behind (180 s) still arrive at its pace; a 1 s node's field 180 s behind stopped."""
    rule("node", "metric_lag_s", 120)
    slow, fast = nodes[0], nodes[1]
    token(slow.source, "node", T0, 60.0, 60.0)
    token(fast.source, "node", T0, 1.0, 1.0)
    for node in (slow, fast):
        store((node.id,), T0 - 180, temp_inlet_c=25.0, cpu_pct=10.0)
        store((node.id,), T0, cpu_pct=12.0)
    evaluate(T0)
    assert firing() == {str(fast.id): pytest.approx(180.0)}
    store((slow.id,), T0 + 60, cpu_pct=12.0)  # 240 s behind: 4 of its intervals
    evaluate(T0 + 60)
    assert firing() == {str(fast.id): pytest.approx(180.0), str(slow.id): pytest.approx(240.0)}


def test_a_15_s_source_between_batches_is_not_stale_so_its_lag_still_counts(
    nodes: list[Node],
) -> None:
    """Stale past 3 of its intervals (45 s), not STALE_AFTER_S (30 s): a field 150 s behind
    on a node last heard from 40 s ago is a lag, not silence."""
    rule("node", "metric_lag_s", 120)
    token(nodes[0].source, "node", T0 - 40, 15.0, 15.0)
    store((nodes[0].id,), T0 - 190, temp_inlet_c=25.0, cpu_pct=10.0)
    store((nodes[0].id,), T0 - 40, cpu_pct=12.0)
    evaluate(T0)
    assert firing() == {str(nodes[0].id): pytest.approx(150.0)}


def test_a_field_the_agent_reads_every_300_s_is_judged_by_its_own_interval(
    nodes: list[Node],
) -> None:
    """A 1 s node agent that reads a field every 300 ticks says so (`fields_s`; PCIe
    throughput on a real node, power here): 250 s without it is its pace; the inlet
    temperature 150 s behind has stopped; the slow field 1,250 s behind (past 4 × 300 s)
    has stopped too."""
    rule("node", "metric_lag_s", 120)
    node = nodes[0]
    token(node.source, "node", T0, 1.0, 1.0, {"power_w": 300.0})
    store((node.id,), T0 - 250, power_w=900.0, cpu_pct=10.0, temp_inlet_c=25.0)
    store((node.id,), T0, cpu_pct=12.0, temp_inlet_c=25.0)
    evaluate(T0)
    assert firing() == {}
    store((node.id,), T0 + 150, cpu_pct=12.0)  # the inlet sensor stopped at T0
    evaluate(T0 + 150)
    # power_w is 400 s behind, within 4 of its 300 s: the inlet's 150 s is what counts
    assert firing() == {str(node.id): pytest.approx(150.0)}
    AlertInstance.objects.all().delete()
    store((node.id,), T0 + 1000, cpu_pct=12.0, temp_inlet_c=25.0)
    evaluate(T0 + 1000)
    assert firing() == {str(node.id): pytest.approx(1250.0)}  # power_w: 1,250 s behind
