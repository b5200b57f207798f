"""The health record's states as alert rules (docs/rules.md, "GPU health"): the task
fleet.health judges every GPU once a minute and the rules read what it stored. A GPU with a
remap failure fires `gpu-health-replace`, one with a pending remap `gpu-health-reset-needed`,
one with a memory XID `gpu-health-watch` (off unless turned on) — each naming its evidence —
and a healthy GPU fires nothing; a GPU reset resolves its alert at the next minute's
judgement."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fleet import tasks
from fleet.alerts.engine import evaluate
from fleet.alerts.messages import render_summary
from fleet.alerts.models import AlertInstance, AlertRule
from fleet.read import computed
from tests.support.databases import T
from tests.support.health_seed import Place, event, latest, site_with_gpus

pytestmark = pytest.mark.django_db

RULES = ("gpu-health-watch", "gpu-health-reset-needed", "gpu-health-replace")


@pytest.fixture(autouse=True)
def fresh_states() -> Iterator[None]:
    computed.clear()
    yield
    computed.clear()


@pytest.fixture
def place() -> Place:
    """Four GPUs: one with a remap failure, one with a remap pending, one that reported XID
    92 (a memory error NVIDIA says to watch), one healthy; only the health rules enabled."""
    place = site_with_gpus(per_node=4)
    AlertRule.objects.exclude(key__in=RULES).update(enabled=False)
    AlertRule.objects.filter(key__in=RULES).update(enabled=True)  # watch is off by default
    failed, pending, watched, healthy = place.gpus
    latest(failed, T + 50, remap_pending=0, remap_failure=1)
    latest(pending, T + 50, remap_pending=1, remap_failure=0)
    latest(watched, T + 50, remap_pending=0, remap_failure=0)
    latest(healthy, T + 50, remap_pending=0, remap_failure=0)
    event(watched, T + 20, code=92)
    return place


def firing() -> dict[tuple[str, str], AlertInstance]:
    return {(i.rule.key, i.entity): i for i in AlertInstance.objects.filter(state="firing")}


def said(inst: AlertInstance) -> str:
    """The instance's summary as its messages word it (its labels fill the placeholders
    its signal supplies)."""
    node, gpu = inst.node.name if inst.node else "", inst.entity.split(":")[1]
    return render_summary(inst.rule.summary, {**inst.labels, "node": node, "gpu": gpu}, "")


def entity(place: Place, k: int) -> str:
    gpu = place.gpus[k]
    return f"{gpu.node_id}:{gpu.index}"


def test_each_state_fires_its_rule_with_its_evidence(place: Place) -> None:
    tasks.gpu_health(T + 60)
    evaluate(T + 61)
    fired = firing()
    assert set(fired) == {
        ("gpu-health-replace", entity(place, 0)),
        ("gpu-health-reset-needed", entity(place, 1)),
        ("gpu-health-watch", entity(place, 2)),
    }
    replace = fired[("gpu-health-replace", entity(place, 0))]
    assert replace.rule.severity == "critical"
    assert said(replace).startswith("s1-gpu01 GPU 0 to replace: row remap failure flag set")
    reset = fired[("gpu-health-reset-needed", entity(place, 1))]
    assert reset.rule.severity == "warning" and "remap_pending = 1" in said(reset)
    watch = fired[("gpu-health-watch", entity(place, 2))]
    assert watch.rule.severity == "info" and "XID 92" in said(watch)


def test_nothing_fires_before_the_task_has_judged_the_gpus(place: Place) -> None:
    evaluate(T + 61)
    assert firing() == {}


def test_a_reset_resolves_the_reset_needed_alert_at_the_next_judgement(place: Place) -> None:
    tasks.gpu_health(T + 60)
    evaluate(T + 61)
    latest(place.gpus[1], T + 110, remap_pending=0, remap_failure=0)
    evaluate(T + 111)  # judged a minute ago: still stored as reset needed
    assert ("gpu-health-reset-needed", entity(place, 1)) in firing()
    tasks.gpu_health(T + 120)
    evaluate(T + 121)
    assert ("gpu-health-reset-needed", entity(place, 1)) not in firing()
    assert ("gpu-health-replace", entity(place, 0)) in firing()


def test_the_watch_rule_is_off_until_an_operator_turns_it_on(place: Place) -> None:
    AlertRule.objects.filter(key="gpu-health-watch").update(enabled=False)  # as installed
    assert not AlertRule.objects.get(key="gpu-health-watch").pack_values["enabled"]
    tasks.gpu_health(T + 60)
    evaluate(T + 61)
    assert {rule for rule, _ in firing()} == {"gpu-health-replace", "gpu-health-reset-needed"}


def test_a_cache_that_cannot_be_reached_fires_nothing_and_fails_no_evaluation(
    place: Place, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Down:
        def get(self, key: str) -> None:
            raise ConnectionError("Redis is restarting")

        def delete_many(self, keys: list[str]) -> None:
            raise ConnectionError("Redis is restarting")

    tasks.gpu_health(T + 60)  # stored while the cache answered
    monkeypatch.setattr(computed, "caches", {computed.CACHE: Down()})
    evaluate(T + 61)
    assert firing() == {}
    monkeypatch.undo()
