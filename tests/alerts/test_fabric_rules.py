"""The fabric rules through the engine (docs/rules.md, *Fabric*): a recorded HGX server's ports
(tests/data/sysfs/infiniband/hgx-ndr) read by the agent's fabric collector every 10 s and
stored by the ingest pipeline; a counter rise in the tree fires the rule naming the port, and
the instance resolves once the port is quiet again. An error rate under its limit, and a
port that was never up, fire nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.alerts.engine import evaluate
from fleet.alerts.messages import render_summary
from fleet.alerts.models import AlertInstance, AlertRule
from fleet.alerts.rulepack_fabric import FABRIC_RULES
from fleet.health import fabric
from fleet.ingest.pipeline import IngestPipeline
from fleet.models import Node
from tests.support import one_node
from tests.support.fabric_tree import PortTree, send_fabric

pytestmark = pytest.mark.django_db

node = one_node.node
pipeline = one_node.pipeline

READ_S = 10.0  # the agent's fabric read interval
FLAPPED, FLAPPING, DOWN = (
    "node-fabric-port-flapped",
    "node-fabric-port-flapping",
    "node-fabric-port-down",
)
SYMBOLS = "node-fabric-symbol-error-rate"


@pytest.fixture
def tree(tmp_path: Path, node: Node) -> PortTree:
    """The recorded HGX server's ten ports, and of the pack only the fabric rules."""
    AlertRule.objects.exclude(key__in=[r.key for r in FABRIC_RULES]).update(enabled=False)
    return PortTree("hgx-ndr", tmp_path / "sys")


class Agent:
    """The node's agent reading the tree every READ_S, and the engine evaluating after each
    read, from T (an hour ago: batches in the past are what the pipeline accepts)."""

    def __init__(self, tree: PortTree, pipeline: IngestPipeline, node: Node) -> None:
        self.tree, self.pipeline, self.source = tree, pipeline, node.source
        self.now = time.time() - 3600
        self.seq = 0

    def run(self, seconds: float) -> None:
        """Read, send and evaluate every READ_S for `seconds` (at least once)."""
        for _ in range(max(1, round(seconds / READ_S))):
            self.seq += 1
            send_fabric(self.pipeline, self.source, self.seq, self.tree.read(self.now))
            evaluate(self.now + 0.5)
            self.now += READ_S


@pytest.fixture
def agent(tree: PortTree, pipeline: IngestPipeline, node: Node) -> Iterator[Agent]:
    yield Agent(tree, pipeline, node)


def active() -> dict[str, str]:
    """Rule key -> the port its active instance names."""
    return {
        i.rule.key: i.labels.get("port", "")
        for i in AlertInstance.objects.filter(state__in=("pending", "firing")).select_related(
            "rule"
        )
    }


def firing() -> set[str]:
    return set(AlertInstance.objects.filter(state="firing").values_list("rule__key", flat=True))


def said(key: str) -> str:
    inst = AlertInstance.objects.filter(rule__key=key).latest("started_at")
    names = {"node": one_node.NODE, "port": inst.labels.get("port", ""), "value": inst.value}
    return render_summary(inst.rule.summary, names, "")


def test_a_link_flap_fires_naming_the_port_and_resolves_once_out_of_the_window(
    agent: Agent, tree: PortTree
) -> None:
    agent.run(60)
    assert active() == {}  # mlx5_3's recorded link_downed of 1 is its past, not a flap
    tree.add("mlx5_3", "link_downed", 1)
    agent.run(READ_S)
    assert active() == {FLAPPED: "mlx5_3 port 1"}
    assert firing() == {FLAPPED}
    assert said(FLAPPED) == "gpu-a01-01 mlx5_3 port 1 went down and retrained (1× in 10 min)"
    agent.run(fabric.FLAP_WINDOW_S)
    assert active() == {}
    assert AlertInstance.objects.get(rule__key=FLAPPED).state == "resolved"


def test_a_second_flap_within_the_hour_is_flapping(agent: Agent, tree: PortTree) -> None:
    agent.run(30)
    tree.add("mlx5_5", "link_downed", 1)
    agent.run(20 * 60)
    assert FLAPPING not in active()
    tree.add("mlx5_5", "link_downed", 1)
    agent.run(READ_S)
    assert active()[FLAPPING] == "mlx5_5 port 1"
    assert said(FLAPPING) == "gpu-a01-01 mlx5_5 port 1 is flapping: down 2× in the last hour"


def test_symbol_errors_above_the_documented_rate_fire_and_resolve_once_they_stop(
    agent: Agent, tree: PortTree
) -> None:
    for _ in range(40):  # 5 errors every 10 s: 1,800 an hour
        tree.add("mlx5_6", "symbol_error", 5)
        agent.run(READ_S)
    assert active() == {SYMBOLS: "mlx5_6 port 1"}
    assert said(SYMBOLS) == "gpu-a01-01 mlx5_6 port 1: symbol errors 1,800 an hour (limit 120)"
    agent.run(2 * fabric.RATE_WINDOW_S + READ_S)  # the rate window holds no more of them
    assert active() == {}
    assert AlertInstance.objects.get(rule__key=SYMBOLS).state == "resolved"


def test_errors_rising_slower_than_the_documented_rate_fire_nothing(
    agent: Agent, tree: PortTree
) -> None:
    limit = fabric.RATE_BY_COUNTER["symbol_error"].per_hour  # 120 an hour: 1 every 30 s
    for i in range(90):  # 15 minutes, one error every 40 s on three counters
        if i % 4 == 0:
            for name in ("symbol_error", "port_rcv_errors", "link_error_recovery"):
                tree.add("mlx5_2", name, 1)
        agent.run(READ_S)
    assert limit > 3600 / 40  # 90 an hour
    assert active() == {}
    assert tree.counter("mlx5_2", "symbol_error") > 0  # they did rise


def test_a_port_that_was_up_and_went_down_fires_and_resolves_when_it_is_back(
    agent: Agent, tree: PortTree
) -> None:
    agent.run(60)
    assert active() == {}  # mlx5_9 is DOWN, Disabled in the recording: never up, not judged
    tree.state("mlx5_1", "1: DOWN", "2: Polling")
    agent.run(READ_S)
    assert active() == {DOWN: "mlx5_1 port 1"}
    assert firing() == set()  # pending: a port down for one read may come straight back
    agent.run(fabric.PORT_DOWN_FOR_S)
    assert firing() == {DOWN}
    assert said(DOWN) == "gpu-a01-01 mlx5_1 port 1 is down (1 port(s) down that were up)"
    tree.state("mlx5_1", "4: ACTIVE", "5: LinkUp")
    agent.run(READ_S)
    assert active() == {}
