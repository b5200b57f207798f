"""The forecast rules' tests drive the engine the way the beat does: `tick(k)` is the k-th
10 s evaluation after `START` (a minute's start: a forecast's `now` is its minute's), the
forecasts refreshed first where a minute starts (the task fleet.forecasts runs each
minute). `demo_racks` is their site: two racks of the demo, one node and one GPU each,
only the rules under test enabled."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from fleet.alerts.engine import evaluate
from fleet.alerts.grouping import Places
from fleet.alerts.messages import group_notice
from fleet.alerts.models import AlertInstance, AlertRule
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.read import forecast_now
from tests.support.alert_engine import T0

START = T0 // 60 * 60


def demo_racks(rules: Iterable[str], budget_kw: float = 130) -> None:
    """Racks A01 and A02 of the demo at `budget_kw`, a node of one GPU each; only `rules`
    enabled."""
    racks = tuple(replace(p, nodes=1, budget_kw=budget_kw) for p in DEMO_RACKS[:2])
    seed_demo_site("demo", racks, gpus_per_node=1)
    AlertRule.objects.exclude(key__in=tuple(rules)).update(enabled=False)


def tick(k: int) -> None:
    at = START + 1 + 10 * k
    if k % 6 == 0:
        forecast_now.refresh_forecasts(at)
    evaluate(at)


def firing() -> dict[str, AlertInstance]:
    return {i.rule.key: i for i in AlertInstance.objects.filter(state="firing")}


def title(inst: AlertInstance) -> str:
    """The instance's group's firing message title."""
    assert inst.group is not None
    return group_notice(inst.group, "firing", [inst], Places()).title
