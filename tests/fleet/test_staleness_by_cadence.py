"""The site strip's "agents stale" and `/metrics`' agent staleness judge each source by the
cadence its data comes at, with the alert rules' function (fleet/health/cadence.py): a
node whose agent sends every 15 s, or whose GPUs a Prometheus source pulls every 15 s, is
not stale 40 s after its last data; a 1 s node is."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families

from fleet import health
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import GPU, Node, PrometheusSource, PulledGPU, Site
from fleet.read.site_summary import site_payload
from tests.support.latest import store
from tests.support.sources import source_token

pytestmark = pytest.mark.django_db


@pytest.fixture
def site() -> Site:
    return seed_demo_site("demo", (replace(DEMO_RACKS[0], nodes=4),), gpus_per_node=1)


def token(source: str, kind: str, last_seen: float | None, interval: float | None) -> None:
    source_token(
        source,
        kind,
        Site.objects.get(),
        last_seen,
        sample_interval_s=interval,
        batch_interval_s=interval,
    )


def test_one_function_judges_staleness_by_the_sources_interval() -> None:
    assert health.stale_after_s(1.0) == health.STALE_AFTER_S == 30.0
    assert health.stale_after_s(15.0) == 45.0
    assert health.source_stale(100.0, 131.0, 1.0) and not health.source_stale(100.0, 140.0, 15.0)
    assert not health.source_stale(None, 1e9, 1.0)  # never heard from: not "stale"
    assert health.batch_interval_s("site", None, None) == 10.0
    assert health.batch_interval_s("node", 1.0, 5.0) == 5.0


def test_the_strip_counts_a_node_stale_by_the_cadence_its_data_comes_at(site: Site) -> None:
    now = time.time()
    fast, slow, pulled, _never = Node.objects.order_by("name")
    token(fast.source, "node", now - 40, 1.0)  # a 1 s agent: stale after 30 s
    token(slow.source, "node", now - 40, 15.0)  # a 15 s agent: stale after 45 s
    prometheus = PrometheusSource.objects.create(
        name="prom", site=site, url="http://127.0.0.1:9", pull_interval_s=15.0
    )
    gpu = GPU.objects.get(node=pulled)
    PulledGPU.objects.create(source=prometheus, gpu=gpu, first_pulled=now, last_pulled=now)
    for node in (fast, slow):
        store("node", (node.pk,), now - 40, cpu_pct=10.0)
    store("gpu", (pulled.pk, gpu.index), now - 40, temp_gpu_c=60.0)  # no agent, pulled
    assert site_payload(site.pk, now)["agents"] == {
        "nodes": 4,
        "stale": 1,
        "never": 1,
        "level": "warn",
        "words": "1 of 4 nodes · 1 never sent data",
    }
    assert site_payload(site.pk, now + 6)["agents"]["stale"] == 3  # 46 s: past 3 × 15 s


@override_settings(METRICS_PUBLIC=True)
def test_metrics_counts_a_source_stale_by_its_own_batch_interval(site: Site) -> None:
    now = time.time()
    fast, slow, *_ = Node.objects.order_by("name")
    token(fast.source, "node", now - 40, 1.0)
    token(slow.source, "node", now - 40, 15.0)
    token("site:demo", "site", now - 20, None)  # an older facility agent: 10 s default
    text = Client().get("/metrics").content.decode()
    values = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert values[("fleetwatch_agents_stale", ())] == 1.0  # the 1 s node only
    interval = "fleetwatch_agent_batch_interval_seconds"
    assert values[(interval, (("kind", "node"), ("source", slow.source)))] == 15.0
    assert values[(interval, (("kind", "site"), ("source", "site:demo")))] == 10.0
