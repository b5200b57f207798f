"""The allocated-idle rule (`gpu-allocated-idle`, the built-in pack's): a GPU an open
scheduler allocation holds while it runs nothing fires after the ledger's 10 minutes and
not before; bursty inference never does; an idle GPU nothing holds makes no instance; a
team's route (`owner`) gets its own allocations' alerts only; a workload's idle GPUs are one
message; the alert ends with the allocation.

The engine runs in-process at explicit times against latest state stored as the ingest
stores it; deliveries are tried in-process against a local receiver that answers like
Slack (tests/support/alert_engine.py)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

import pytest

from fleet.alerts.engine import evaluate
from fleet.alerts.models import AlertInstance, AlertRule
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import GpuAllocation, Node, Site, Workload
from fleet.notifications.models import Route
from fleet.read.ledger_rules import DEFAULT_RULES
from tests.support import alert_engine
from tests.support.alert_engine import T0, deliver_all, sent, text_of, texts
from tests.support.latest import store_latest
from tests.support.slack_receiver import SlackReceiver

pytestmark = pytest.mark.django_db

only_our_rules = alert_engine.grouping_rules_only  # autouse: every rule disabled
RULE = "gpu-allocated-idle"
IDLE_S = DEFAULT_RULES.idle_minutes * 60
LIMIT_W = 700.0
IDLE = {"util_gpu_pct": 0.0, "power_w": 70.0, "power_limit_w": LIMIT_W}  # an H100 at rest
BUSY = {"util_gpu_pct": 70.0, "power_w": 450.0, "power_limit_w": LIMIT_W}

Gpu = tuple[int, int]


@pytest.fixture
def gpus() -> list[Gpu]:
    """Rack A01 with two nodes of four GPUs, and only the built-in allocated-idle rule."""
    seed_demo_site("lon1", (replace(DEMO_RACKS[0], nodes=2),), gpus_per_node=4)
    AlertRule.objects.filter(key=RULE).update(enabled=True)
    nodes = Node.objects.order_by("name").values_list("pk", flat=True)
    return [(node, index) for node in nodes for index in range(4)]


def allocate(gpus: list[Gpu], *, namespace: str = "", account: str = "", name: str) -> Workload:
    """An open scheduler allocation of `gpus` to a pod (namespace) or a Slurm job (account)."""
    site = Site.objects.get(slug="lon1")
    pod = bool(namespace)
    workload = Workload.objects.create(
        site=site,
        kind="pod" if pod else "slurm",
        key=f"{namespace}/{name}" if pod else name,
        namespace=namespace,
        pod=name if pod else "",
        job="" if pod else name,
        account=account,
        user="alice",
        first_seen=T0 - 3600,
    )
    for node, index in gpus:
        GpuAllocation.objects.create(
            site=site,
            node_id=node,
            gpu=index,
            workload=workload,
            source="scheduler",
            started=T0 - 3600,
            last_seen=T0,
        )
    return workload


def run(gpus: list[Gpu], until_s: float, busy_at: Collection[int] = (), every: int = 60) -> None:
    """Every GPU reports and the engine evaluates at T0 + 0, every, 2 × every … until_s; in
    the ticks listed in `busy_at` (their index) the GPUs are busy."""
    for tick, at in enumerate(range(0, int(until_s) + 1, every)):
        for key in gpus:
            store_latest("gpu", key, T0 + at, **(BUSY if tick in busy_at else IDLE))
        evaluate(T0 + at)


def instances(state: str | None = None) -> list[AlertInstance]:
    rows = AlertInstance.objects.filter(rule__key=RULE)
    return list(rows.filter(state=state) if state else rows)


def test_an_allocation_running_nothing_fires_after_ten_minutes_and_not_before(
    slack: SlackReceiver, gpus: list[Gpu]
) -> None:
    allocate(gpus[:1], namespace="ml-research", name="train-0")
    run(gpus[:1], IDLE_S - 60)
    assert [i.state for i in instances()] == ["pending"]
    assert sent(slack) == []
    run_at(gpus[:1], IDLE_S)
    assert [i.state for i in instances()] == ["firing"]
    [message] = sent(slack)
    assert message.body["text"].startswith(
        "INFO: ml-research/train-0 holds gpu-a01-01 GPU 0 and runs nothing"
    )
    labels = instances()[0].labels
    assert (labels["owner"], labels["user"], labels["workload"]) == (
        "ml-research",
        "alice",
        "train-0",
    )


def run_at(gpus: list[Gpu], at: float, values: dict[str, float] = IDLE) -> None:
    for key in gpus:
        store_latest("gpu", key, T0 + at, **values)
    evaluate(T0 + at)


def test_bursty_inference_never_fires(slack: SlackReceiver, gpus: list[Gpu]) -> None:
    allocate(gpus[:1], namespace="serving", name="infer-0")
    # a request every few minutes: busy at one tick in four, idle in between, for 40 minutes
    run(gpus[:1], 4 * IDLE_S, busy_at=set(range(0, 41, 4)))
    assert instances("firing") == []
    assert sent(slack) == []


def test_an_idle_gpu_nothing_holds_makes_no_instance(slack: SlackReceiver, gpus: list[Gpu]) -> None:
    done = allocate(gpus[1:2], namespace="ml-research", name="finished")
    GpuAllocation.objects.filter(workload=done).update(ended=T0 - 60)  # released an hour ago
    run(gpus[:2], 2 * IDLE_S)
    assert instances() == []


def test_the_alert_ends_when_the_allocation_does(slack: SlackReceiver, gpus: list[Gpu]) -> None:
    job = allocate(gpus[:1], account="physics", name="1001")
    run(gpus[:1], IDLE_S)
    assert [i.state for i in instances()] == ["firing"]
    GpuAllocation.objects.filter(workload=job).update(ended=T0 + IDLE_S + 30)
    run_at(gpus[:1], IDLE_S + 60)
    assert [i.state for i in instances()] == ["resolved"]
    assert [t.split(" (")[0] for t in texts(sent(slack))] == [
        "INFO: physics/job 1001 holds gpu-a01-01 GPU 0 and runs nothing",
        "Resolved: physics/job 1001 holds gpu-a01-01 GPU 0 and runs nothing",
    ]


def test_a_teams_route_gets_only_its_own_idle_allocations(
    slack: SlackReceiver, gpus: list[Gpu]
) -> None:
    Route.objects.create(
        name="ml-research", webhook_url=slack.url("/ml"), owner="ml-research", min_severity="info"
    )
    allocate(gpus[:1], namespace="ml-research", name="train-0")
    allocate(gpus[1:2], account="physics", name="1001")
    run(gpus[:2], IDLE_S)
    deliver_all()
    to_team = [m.body["text"] for m in slack.received("/ml")]
    assert len(to_team) == 1 and "ml-research/train-0" in to_team[0]
    # the other team's alert goes where it would without the team's route: the default
    elsewhere = texts(slack.received("/alerts"))
    assert len(elsewhere) == 1 and "physics/job 1001" in elsewhere[0]


def test_a_workloads_idle_gpus_are_one_message_listing_them(
    slack: SlackReceiver, gpus: list[Gpu]
) -> None:
    eight = allocate(gpus, namespace="ml-research", name="train-8")  # both nodes, all GPUs
    run(gpus, IDLE_S)
    [message] = sent(slack)
    assert message.body["text"].startswith(
        "INFO: Allocated GPU idle: ml-research/train-8 holds 8 GPUs in rack A01"
    )
    body = text_of(message)
    assert body.count("GPU 3") == 2  # each node's GPUs are listed
    assert len(instances("firing")) == 8
    assert {i.group.key for i in instances("firing") if i.group} == {f"workload:{eight.pk}:{RULE}"}
