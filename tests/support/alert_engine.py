"""The alert engine run in-process at explicit times, against latest state written through
`merge_latest`, with its deliveries tried in-process against a local receiver that answers
like Slack: the clock, what reached Slack, and the rules and places of the grouping tests
(A01, A02 on CDU-1; A04 air-cooled)."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import time
from dataclasses import replace
from typing import Any

import pytest
from django.utils import timezone

from fleet.alerts.models import AlertGroup, AlertInstance, AlertRule
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import CoolingLoop, Node, Rack
from fleet.notifications.delivery import attempt
from fleet.notifications.models import Delivery
from fleet.notifications.slack import SlackWebhook
from tests.support.latest import store_latest
from tests.support.slack_receiver import Received, SlackReceiver

T0 = time.time() - 3600  # evaluations run at explicit, increasing times
HW_SLOWDOWN = 0x40  # the clock-event reason bit of HW thermal slowdown

_tries = itertools.count(1)


def deliver_all() -> None:
    """Try every pending delivery once, each in its own send slot (≥ 1 s apart)."""
    for pk in (
        Delivery.objects.filter(state=Delivery.PENDING).order_by("pk").values_list("pk", flat=True)
    ):
        attempt(pk, SlackWebhook(), now=timezone.now() + dt.timedelta(seconds=2 * next(_tries)))


def sent(slack: SlackReceiver) -> list[Received]:
    """What reached the default route once every pending delivery was tried."""
    deliver_all()
    return slack.received("/alerts")


def text_of(message: Received) -> str:
    return json.dumps(message.body, ensure_ascii=False)


def texts(messages: list[Received]) -> list[str]:
    return [m.body["text"] for m in messages]


def firing(messages: list[Received]) -> list[str]:
    return [m.body["text"] for m in messages if m.body["text"].startswith("CRITICAL: ")]


def signal_rule(
    scope: str, signal: str, threshold: float, cmp: str = "ge", **params: Any
) -> AlertRule:
    """A warning rule on one signal that fires at once (no `for` duration)."""
    return AlertRule.objects.create(
        key=f"{scope}-{signal}",
        name=signal,
        scope=scope,
        signal=signal,
        params=params,
        comparison=cmp,
        threshold=threshold,
        for_duration=dt.timedelta(0),
        severity="warning",
        summary="{rule}",
    )


def only_inlet_rule(
    using: str = "default",
    *,
    key: str = "inlet-hot",
    threshold: float = 40.0,
    severity: str = "critical",
    summary: str = "inlet {value:.1f} °C",
    **fields: Any,
) -> AlertRule:
    """Every other rule disabled, and one over a node's inlet temperature (database alias
    `using`)."""
    AlertRule.objects.using(using).update(enabled=False)
    return AlertRule.objects.using(using).create(
        key=key,
        name=key.replace("-", " ").capitalize(),
        scope="node",
        signal="temp_inlet_c",
        comparison="gt",
        threshold=threshold,
        severity=severity,
        summary=summary,
        **fields,
    )


def fire(
    severity: str,
    *,
    rack: Rack | None = None,
    loop: CoolingLoop | None = None,
    group: AlertGroup | None = None,
) -> None:
    """A firing instance at a rack (as a node's or GPU's carries its rack) or a loop, in
    `group` (an incident) when given."""
    now = timezone.now()
    rule = AlertRule.objects.filter(severity=severity).first()
    assert rule is not None, f"the built-in pack has a {severity} rule"
    site_id = rack.hall.site_id if rack is not None else loop.site_id if loop is not None else None
    AlertInstance.objects.create(
        rule=rule,
        scope="rack" if rack else "loop",
        entity=f"{AlertInstance.objects.count()}",  # one active instance per rule and entity
        state="firing",
        site_id=site_id,
        rack=rack,
        loop=loop or (rack.loop if rack else None),
        group=group,
        started_at=now,
        fired_at=now,
        updated_at=now,
    )


# ---------------------------------------------------------------------------
# the grouping tests' site and rules


def seed_grouping_site() -> None:
    """A01, A02 on CDU-1 (2 nodes × 4 GPUs each); A04 air-cooled, 9 nodes × 8 GPUs."""
    a01, a02, _, a04 = DEMO_RACKS[:4]
    seed_demo_site("lon1", (replace(a01, nodes=2), replace(a02, nodes=2)), gpus_per_node=4)
    seed_demo_site("lon1", (replace(a04, nodes=9),), gpus_per_node=8)


def slowdown_rule(for_s: float = 0, **fields: Any) -> AlertRule:
    return AlertRule.objects.create(
        **{
            "key": "hw-slowdown",
            "name": "HW thermal slowdown",
            "scope": "gpu",
            "signal": "hw_thermal_slowdown",
            "comparison": "ge",
            "threshold": 1,
            "for_duration": dt.timedelta(seconds=for_s),
            "severity": "critical",
            "summary": "{node} GPU {gpu} in HW thermal slowdown",
            **fields,
        }
    )


def loop_rule(
    key: str, name: str, signal: str, condition: tuple[str, float], summary: str
) -> AlertRule:
    """A critical rule over every cooling loop's `signal`."""
    comparison, threshold = condition
    return AlertRule.objects.create(
        key=key,
        name=name,
        scope="loop",
        signal=signal,
        comparison=comparison,
        threshold=threshold,
        severity="critical",
        summary=summary,
    )


def pump_rule() -> AlertRule:
    return loop_rule(
        "no-pump", "No CDU pump running", "pumps_running", ("lt", 1), "{loop}: no pump running"
    )


def flow_rule() -> AlertRule:
    return loop_rule(
        "flow-stopped", "CDU flow stopped", "flow_lpm", ("le", 5), "{loop} flow {value:.0f} L/min"
    )


def gpus_of(*racks: str) -> list[tuple[int, int]]:
    nodes = Node.objects.filter(rack__name__in=racks).prefetch_related("gpus")
    return [(n.pk, g.index) for n in nodes for g in n.gpus.all()]


def gpus_at(at: float, hot: list[tuple[int, int]]) -> None:
    """Every GPU of A01, A02 and A04 at T0 + at, the `hot` ones in HW thermal slowdown."""
    for key in gpus_of("A01", "A02", "A04"):
        store_latest("gpu", key, T0 + at, clock_event_reasons=HW_SLOWDOWN if key in hot else 0)


def pumps_at(at: float, running: int) -> None:
    """CDU-1 with `running` pumps (215 L/min each) at T0 + at."""
    loop = CoolingLoop.objects.get(name="CDU-1")
    store_latest("loop", (loop.pk,), T0 + at, pumps_running=running, flow_lpm=215.0 * running)


# Fixtures: a module binds them to the names its tests take, e.g.
# `only_our_rules = alert_engine.our_rules_only`.


@pytest.fixture(autouse=True)
def our_rules_only() -> None:
    """Only the test's own rules: the built-in pack is installed by migration."""
    AlertRule.objects.update(enabled=False)


@pytest.fixture(autouse=True)
def grouping_rules_only(settings: Any) -> None:
    """Only the test's own rules (the built-in pack is installed by migration); groups
    flushed after a minute, repeats after four hours."""
    AlertRule.objects.update(enabled=False)
    settings.ALERT_GROUP_INTERVAL_S = 60
    settings.ALERT_REPEAT_S = 4 * 3600


@pytest.fixture
def grouping_site() -> None:
    seed_grouping_site()
