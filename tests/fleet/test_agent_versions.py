"""Agent versions against the oldest this server supports (fleet/agent_versions.py), and
the /metrics series an Alertmanager rule fires on: old agents counted per site, each node's
agent as an info series."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest
from django.test import Client

from fleet.agent_versions import OLDEST_SUPPORTED_AGENT, Support, agent_support
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import Node, Site, SourceToken
from tests.support.exposition import series

TOKEN = "prom-secret-agents"


@pytest.mark.parametrize(
    ("version", "support"),
    [
        (OLDEST_SUPPORTED_AGENT, Support.CURRENT),
        ("0.10.0", Support.CURRENT),  # newer than 0.9.x: compared as versions, not text
        ("1.0.0rc1", Support.CURRENT),
        ("0.0.9", Support.OUTDATED),
        ("0.1.0rc1", Support.OUTDATED),  # a pre-release of the oldest is older than it
        ("0.1.0.dev3", Support.OUTDATED),
        (None, Support.UNKNOWN),
        ("", Support.UNKNOWN),
        ("sim", Support.UNKNOWN),
        ("1.0 beta (custom build)", Support.UNKNOWN),
        ("9" * 200, Support.UNKNOWN),
    ],
)
def test_a_reported_version_is_judged_as_a_pep_440_version(
    version: str | None, support: Support
) -> None:
    assert agent_support(version).support is support


def test_an_old_agent_is_flagged_in_words_with_what_to_do() -> None:
    assert agent_support("0.0.9").flag() == (
        f"agent 0.0.9 is older than {OLDEST_SUPPORTED_AGENT}, the oldest this server"
        " supports — upgrade fleetwatch-agent"
    )
    assert agent_support(OLDEST_SUPPORTED_AGENT).flag() is None
    assert agent_support(None).flag() is None and agent_support(None).words() == "not reported"


def test_an_unparseable_or_huge_version_is_shown_cut_and_not_compared() -> None:
    judged = agent_support("x" * 10_000)
    assert judged.version is None and judged.reported is not None
    assert len(judged.reported) <= 65 and "not compared" in judged.words()


# -- /metrics ------------------------------------------------------------------------------


@pytest.fixture
def site(settings: Any) -> Site:
    settings.METRICS_TOKEN = TOKEN
    racks = tuple(replace(plan, nodes=2) for plan in DEMO_RACKS[:2])
    return seed_demo_site("demo", racks, gpus_per_node=1)


def report(node: Node, version: Any) -> None:
    """What the ingest keeps of an agent's node_info, and its accepted batch."""
    Node.objects.filter(pk=node.pk).update(info={"agent_version": version})
    SourceToken.objects.create(
        source=node.source,
        kind="node",
        site=node.rack.hall.site,
        token_hash=f"{node.pk:064x}",
        last_seen=time.time(),
    )


def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    return series(response.content.decode())


def agent_info(
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float], node: Node
) -> dict[str, str]:
    [labels] = [
        dict(labels)
        for (name, labels), _ in found.items()
        if name == "fleetwatch_node_agent_info" and dict(labels)["node"] == node.name
    ]
    return labels


@pytest.mark.django_db
def test_metrics_count_nodes_running_an_agent_older_than_supported(site: Site) -> None:
    old, current, odd, silent = Node.objects.order_by("name")[:4]
    report(old, "0.0.9")
    report(current, OLDEST_SUPPORTED_AGENT)
    report(odd, "sim")
    found = scrape()
    assert found[("fleetwatch_nodes_agent_outdated", (("site", "demo"),))] == 1.0
    assert agent_info(found, old) == {
        "site": "demo",
        "rack": old.rack.name,
        "node": old.name,
        "version": "0.0.9",
        "protocol": "1",
        "support": "outdated",
    }
    assert agent_info(found, current)["support"] == "current"
    assert agent_info(found, odd)["version"] == "unknown"
    assert agent_info(found, odd)["support"] == "unknown"
    assert agent_info(found, silent)["protocol"] == "none"
    assert agent_info(found, silent)["version"] == "unknown"


@pytest.mark.django_db
def test_metrics_say_no_site_has_an_old_agent_when_all_are_current(site: Site) -> None:
    for node in Node.objects.all():
        report(node, OLDEST_SUPPORTED_AGENT)
    found = scrape()
    assert found[("fleetwatch_nodes_agent_outdated", (("site", "demo"),))] == 0.0
