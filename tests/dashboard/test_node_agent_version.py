"""A node's agent on its page and in the admin's node list: its version and protocol, and
an agent older than the oldest this server supports flagged in words."""

from __future__ import annotations

import re
import time
from dataclasses import replace
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from fleet.agent_versions import OLDEST_SUPPORTED_AGENT
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import Node, SourceToken
from tests.support import people
from tests.support.pages import fold, text

pytestmark = pytest.mark.django_db

UPGRADE = "upgrade fleetwatch-agent"


fast_passwords = people.fast_passwords  # autouse


@pytest.fixture
def node() -> Node:
    seed_demo_site("demo", (replace(DEMO_RACKS[0], nodes=1),), gpus_per_node=1)
    return Node.objects.get()


@pytest.fixture
def admin_client() -> Client:
    User.objects.create_superuser("root", password="pw")
    c = Client()
    c.login(username="root", password="pw")
    return c


def report(node: Node, info: Any) -> None:
    """What the ingest keeps of an agent's node_info, and its accepted batch."""
    Node.objects.filter(pk=node.pk).update(info=info)
    SourceToken.objects.create(
        source=node.source,
        kind="node",
        site=node.rack.hall.site,
        token_hash="a" * 64,
        last_seen=time.time(),
    )


def test_a_node_running_an_old_agent_is_flagged_on_its_page(
    admin_client: Client, node: Node
) -> None:
    report(node, {"agent_version": "0.0.9"})
    page = text(admin_client.get(f"/nodes/{node.id}/"))
    assert "Agent 0.0.9 · protocol v1" in page
    assert (
        f"agent 0.0.9 is older than {OLDEST_SUPPORTED_AGENT}, the oldest this server supports"
        f" — {UPGRADE}"
    ) in page


def test_a_node_running_a_current_agent_is_not_flagged(admin_client: Client, node: Node) -> None:
    report(node, {"agent_version": OLDEST_SUPPORTED_AGENT})
    page = text(admin_client.get(f"/nodes/{node.id}/"))
    assert f"Agent {OLDEST_SUPPORTED_AGENT} · protocol v1" in page
    assert UPGRADE not in page and "older than" not in page


def test_a_node_never_heard_from_shows_its_agent_as_not_reported(
    admin_client: Client, node: Node
) -> None:
    page = text(admin_client.get(f"/nodes/{node.id}/"))
    assert "Agent version not reported · no batch accepted yet" in page
    assert UPGRADE not in page


@pytest.mark.parametrize("version", ["sim", "1.0 beta (custom build)", 7, ["0.0.1"], "9" * 500])
def test_a_version_that_is_no_version_number_is_shown_not_judged(
    admin_client: Client, node: Node, version: Any
) -> None:
    report(node, {"agent_version": version})
    response = admin_client.get(f"/nodes/{node.id}/")
    assert response.status_code == 200
    page = text(response)
    assert UPGRADE not in page
    if isinstance(version, list):
        assert "Agent version not reported" in page
    elif version == 7:
        assert "Agent 7 · protocol v1" in page  # "7" is a version: 7 > 0.1.0
    else:
        assert "(not a version number: not compared) · protocol v1" in page


def test_the_admin_node_list_shows_each_agent_and_flags_an_old_one(
    admin_client: Client,
) -> None:
    seed_demo_site("demo", (replace(DEMO_RACKS[0], nodes=3),), gpus_per_node=1)
    old, current, silent = Node.objects.order_by("name")
    Node.objects.filter(pk=old.pk).update(info={"agent_version": "0.0.9"})
    Node.objects.filter(pk=current.pk).update(info={"agent_version": OLDEST_SUPPORTED_AGENT})
    html = admin_client.get("/admin/fleet/node/").content.decode()
    rows = {node.name: row_text(html, node.name) for node in (old, current, silent)}
    assert f"0.0.9 — outdated: older than {OLDEST_SUPPORTED_AGENT}, upgrade it" in rows[old.name]
    assert OLDEST_SUPPORTED_AGENT in rows[current.name] and "outdated" not in rows[current.name]
    assert "not reported" in rows[silent.name]


def row_text(html: str, name: str) -> str:
    """The admin list's row of one node, as a reader sees it."""
    [row] = [r for r in re.findall(r"<tr.*?</tr>", html, re.S) if f">{name}<" in r]
    return fold(row)
