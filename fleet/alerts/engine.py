"""The alert engine: every enabled rule against the latest state of every entity of its
scope; one instance per (rule, entity), pending → firing → resolved (docs/rules.md,
"Evaluation").

One evaluation: claim the tick (a conditional UPDATE of the single `AlertEvaluation` row,
`tick <= now - interval/2`, inside the evaluation's transaction: on PostgreSQL a second
evaluation waits on that row lock and then re-checks; on SQLite the write lock serialises
them; a redelivered, late or second beat's tick finds it taken and does nothing). Then
read the latest state in bulk (one query per sample kind, plus the inventory figures a
signal needs), compute each rule's value per entity, and write only the instances that
changed (bulk create and bulk update) with one history row per change. New instances get
their place (fleet/alerts/grouping.py); instances that fire join their group; the groups
then send what they owe (fleet/alerts/notify.py), in the same transaction.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction

from fleet.alerts import signals
from fleet.alerts.consequences import SUPERSEDED_BY_LOST, superseded_when_lost
from fleet.alerts.evaluate_fabric import label_ports
from fleet.alerts.evaluate_forecast import label_forecasts
from fleet.alerts.evaluate_health import label_health
from fleet.alerts.evaluate_state import (
    Snapshot,
    Values,
    evaluable,
    site_target_rules,
    values_for,
)
from fleet.alerts.grouping import Places, assign_groups
from fleet.alerts.holders import label_holders
from fleet.alerts.models import (
    COMPARISONS,
    AlertEvaluation,
    AlertInstance,
    AlertInstanceEvent,
    AlertRule,
    AlertState,
)
from fleet.alerts.notify import notify_groups

log = logging.getLogger(__name__)

PENDING, FIRING, RESOLVED = AlertState.PENDING, AlertState.FIRING, AlertState.RESOLVED
ACTIVE = (PENDING.value, FIRING.value)
_skipped_logged: set[tuple[int, str]] = set()


@dataclass
class Outcome:
    created: list[AlertInstance] = field(default_factory=list)
    changed: list[AlertInstance] = field(default_factory=list)
    events: list[tuple[AlertInstance, str, str, float | None, bool, str]] = field(
        default_factory=list
    )

    def event(self, inst: AlertInstance, before: str, value: float | None) -> None:
        self.events.append((inst, before, inst.state, value, inst.no_data, inst.superseded_by))


def step(
    rule: AlertRule,
    inst: AlertInstance | None,
    entity: str,
    value: float | None,
    at: dt.datetime,
    out: Outcome,
) -> None:
    """One rule, one entity, one evaluation: the instance's next state."""
    if inst is None:
        if value is None or not rule.breached(value):
            return
        state = FIRING if rule.for_duration <= dt.timedelta(0) else PENDING
        inst = AlertInstance(
            rule=rule,
            scope=rule.scope,
            entity=entity,
            state=state,
            value=value,
            labels={
                **rule.labels,
                "alertname": rule.key,
                "rule": rule.key,
                "severity": rule.severity,
                "scope": rule.scope,
                "entity": entity,
            },
            started_at=at,
            fired_at=at if state == FIRING else None,
            updated_at=at,
        )
        out.created.append(inst)
        out.event(inst, "", value)
        return
    before = inst.state
    if inst.state == PENDING:
        if value is None or not rule.breached(value):
            inst.state, inst.resolved_at = RESOLVED, at  # dropped: never fired
            inst.no_data = value is None
        elif at - inst.started_at >= rule.for_duration - _tick_jitter(rule.for_duration):
            inst.state, inst.fired_at = FIRING, at
        else:
            return
    elif value is None and _absence_clears(rule):
        inst.state, inst.resolved_at, inst.no_data = RESOLVED, at, False  # nothing holds it
    elif value is None:
        if inst.no_data:
            return
        inst.no_data = True  # keeps firing, with its own labels and routing
    elif rule.cleared(value):
        inst.state, inst.resolved_at, inst.no_data = RESOLVED, at, False
    elif inst.no_data:
        inst.no_data = False
    else:
        return
    inst.value = value if value is not None else inst.value
    inst.updated_at = at
    out.changed.append(inst)
    out.event(inst, before, value)


def _absence_clears(rule: AlertRule) -> bool:
    """No value is the end of the condition for this rule's signal (signals.Signal
    `absent_clears`: a GPU nothing holds any more is no idle allocation)."""
    spec = rule.signal_spec
    return spec is not None and spec.absent_clears


def _tick_jitter(for_duration: dt.timedelta) -> dt.timedelta:
    """How early a tick may land and still count as the one that completes `for_duration`:
    beat sends on time, but a worker picks the task up a little late or early (the file
    broker polls once a second), so the tick meant to be 30 s after the breach can be 29.9 s
    after it; without this slack such a rule would wait a whole extra interval. Half an
    interval (and at most half the for-duration): a later tick is never mistaken for it."""
    half_interval = dt.timedelta(seconds=float(settings.ALERT_EVAL_S) / 2)
    return min(half_interval, for_duration / 2)


def evaluate(now: float | None = None) -> dict[str, int]:
    """Evaluate every enabled rule once at `now` (default: the current time)."""
    now = time.time() if now is None else now
    at = dt.datetime.fromtimestamp(now, tz=dt.UTC)
    started = time.monotonic()
    # A tick within half an interval of the last one is a duplicate (a second beat, a
    # redelivery): skipped, so two beats cost one evaluation per interval, not two.
    gap = float(settings.ALERT_EVAL_S) / 2
    with transaction.atomic():
        AlertEvaluation.objects.bulk_create([AlertEvaluation(pk=1)], ignore_conflicts=True)
        if not AlertEvaluation.objects.filter(pk=1, tick__lte=now - gap).update(tick=now):
            return {"skipped": 1}  # this tick (or a later one) was already evaluated
        snap = Snapshot(now)
        active: dict[int, dict[str, AlertInstance]] = {}
        for inst in AlertInstance.objects.filter(state__in=ACTIVE).select_related("rule"):
            active.setdefault(inst.rule_id, {})[inst.entity] = inst
        out = Outcome()
        evaluated: set[int] = set()
        for rule in AlertRule.objects.filter(enabled=True):
            if not evaluable(rule):
                if (rule.pk, rule.signal) not in _skipped_logged:
                    _skipped_logged.add((rule.pk, rule.signal))
                    log.info(
                        "rule %s: signal %s/%s not evaluated yet", rule.key, rule.scope, rule.signal
                    )
                continue
            spec = rule.signal_spec
            assert spec is not None
            evaluated.add(rule.pk)
            values = values_for(spec, snap, rule.params)
            _judge(rule, values, snap, active.get(rule.pk, {}), at, out)
        _supersede_lost(snap, active, at, out)
        for inst in (i for per_rule in active.values() for i in per_rule.values()):
            if inst.state == RESOLVED:
                continue  # superseded above
            if inst.rule_id not in evaluated and not inst.rule.enabled:
                before = inst.state  # the rule was disabled: its instances resolve
                inst.state, inst.resolved_at, inst.updated_at = RESOLVED, at, at
                out.changed.append(inst)
                out.event(inst, before, None)
        places = Places()
        places.locate(out.created)
        label_holders(out.created, snap)
        label_forecasts(out.created, snap)
        label_ports(out.created, snap)
        label_health(out.created, snap)
        assign_groups((i for i, before, after, *_ in out.events if _fires(before, after)), at)
        _write(out)
        # in the same transaction: the claims and delivery rows commit with the changes
        sent = notify_groups(at, places)
        took = time.monotonic() - started
        AlertEvaluation.objects.filter(pk=1).update(last_duration_s=took)
    return {
        "rules": len(evaluated),
        "new": len(out.created),
        "changed": len(out.changed),
        "notified": sent,
    }


def _judge(
    rule: AlertRule,
    values: Values,
    snap: Snapshot,
    active: dict[str, AlertInstance],
    at: dt.datetime,
    out: Outcome,
) -> None:
    """One rule over every entity of its scope. Most entities are healthy and have no
    instance: they are passed over with one comparison (this loop runs ~150,000 times a
    pass at 10,000 GPUs with the whole pack)."""
    per_site = site_target_rules(rule, snap)
    breached, threshold = COMPARISONS[rule.comparison], rule.threshold
    if not active and not per_site:
        # The usual case: nothing of this rule is active and one threshold holds for all,
        # so only a breach matters and no entity name is needed for the rest.
        for key, value in values.items():
            if value is not None and breached(value, threshold):
                step(rule, None, snap.entity(key), value, at, out)
        return
    seen: set[str] = set()
    for key, value in values.items():
        entity = snap.entity(key)
        inst = active.get(entity)
        judged = per_site.get(key, rule) if per_site else rule
        if inst is None:
            if value is None or (judged is rule and not breached(value, threshold)):
                continue
        else:
            seen.add(entity)
        step(judged, inst, entity, value, at, out)
    for entity, inst in active.items():
        if entity not in seen:  # the entity's row is gone
            step(rule, inst, entity, None, at, out)


def _supersede_lost(
    snap: Snapshot, active: dict[int, dict[str, AlertInstance]], at: dt.datetime, out: Outcome
) -> None:
    """A lost GPU (its node reports, it does not: fleet.health.lost) is one state, lost:
    its active thermal and throttle instances end, "superseded: GPU lost", instead of
    firing on no data. The lost GPUs are the `gpu_missing` figure (the same computation as
    the gpu-missing rule's), read only when such an instance is active."""
    candidates = [
        inst
        for per_rule in active.values()
        for inst in per_rule.values()
        if inst.state != RESOLVED and superseded_when_lost(inst.scope, inst.rule.signal)
    ]
    if not candidates:
        return
    spec = signals.get("gpu", "gpu_missing")
    assert spec is not None
    missing = values_for(spec, snap)  # shared with the gpu-missing rule's computation
    lost = {snap.entity(key) for key, value in missing.items() if value == 1.0}
    changed = {id(i) for i in out.changed}
    for inst in candidates:
        if inst.entity not in lost:
            continue
        before = inst.state
        inst.state, inst.resolved_at, inst.updated_at = RESOLVED, at, at
        inst.superseded_by = SUPERSEDED_BY_LOST
        if id(inst) not in changed:
            out.changed.append(inst)
        out.event(inst, before, None)


def _fires(before: str, after: str) -> bool:
    return after == FIRING and before != FIRING


def _write(out: Outcome) -> None:
    if out.created:
        AlertInstance.objects.bulk_create(out.created)
    if out.changed:
        AlertInstance.objects.bulk_update(
            out.changed,
            [
                "state",
                "value",
                "no_data",
                "fired_at",
                "resolved_at",
                "updated_at",
                "group",
                "labels",
                "superseded_by",
            ],
        )
    AlertInstanceEvent.objects.bulk_create(
        AlertInstanceEvent(
            instance=inst,
            at=inst.updated_at,
            from_state=before,
            to_state=after,
            value=value,
            no_data=no_data,
            superseded_by=superseded_by,
        )
        for inst, before, after, value, no_data, superseded_by in out.events
    )
