"""Alert rules as data: what to watch, when it breaches and clears, and how to say so.

The evaluation engine (fleet/alerts/engine.py) reads enabled rules, computes each rule's signal
per entity of its scope (fleet/alerts/signals.py) and keeps one instance per rule and
entity: pending once `breached`, firing after `for_duration`, resolved once `cleared`.
"""

from __future__ import annotations

import datetime as dt
import operator
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models

from fleet.alerts import signals
from fleet.alerts.choices import RuleComparisonChoices, RuleScopeChoices, RuleSeverityChoices
from fleet.alerts.validation import rule_errors

__all__ = (
    "AlertEvaluation",
    "AlertGroup",
    "AlertInstance",
    "AlertInstanceEvent",
    "AlertRule",
    "AlertState",
    "MaintenanceWindow",
    "Silence",
)

COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    "gt": operator.gt,
    "ge": operator.ge,
    "lt": operator.lt,
    "le": operator.le,
}


class AlertRule(models.Model):
    """A condition on one signal of every GPU, node, rack, feed, loop or site in scope."""

    key = models.SlugField(
        max_length=80, unique=True, help_text="stable identifier; built-in rules keep theirs"
    )
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    scope = models.CharField(max_length=8, choices=RuleScopeChoices.choices)
    signal = models.CharField(
        max_length=64, help_text="a signal of the scope, from the signal catalogue"
    )
    params = models.JSONField(
        default=dict, blank=True, help_text="the signal's parameters, e.g. {'window_s': 600}"
    )
    comparison = models.CharField(max_length=2, choices=RuleComparisonChoices.choices)
    threshold = models.FloatField()
    clear_threshold = models.FloatField(
        null=True,
        blank=True,
        help_text="resolves only past this (hysteresis); blank: the threshold",
    )
    for_duration = models.DurationField(
        default=dt.timedelta(0),
        help_text="how long the condition must hold before firing (HH:MM:SS)",
    )
    severity = models.CharField(max_length=8, choices=RuleSeverityChoices.choices)
    labels = models.JSONField(
        default=dict, blank=True, help_text="routing labels, e.g. {'team': 'facilities'}"
    )
    summary = models.CharField(
        max_length=300, help_text="a template, e.g. '{node} GPU {gpu}: {value:.0f} °C'"
    )
    runbook_url = models.URLField(blank=True)
    repeat_interval = models.DurationField(
        null=True,
        blank=True,
        help_text="while firing and not acknowledged, say so again this often (HH:MM:SS);"
        " blank: FLEETWATCH_ALERT_REPEAT_S (4 h)",
    )
    enabled = models.BooleanField(default=True)
    # The built-in pack's values as last installed: a field still equal to its entry here
    # was not edited, so a newer pack may update it (fleet/alerts/rulepack.py).
    builtin = models.BooleanField(default=False, editable=False)
    pack_values = models.JSONField(default=dict, blank=True, editable=False)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("scope", "key")

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        errors = rule_errors(self)
        if errors:
            raise ValidationError(errors)

    @property
    def signal_spec(self) -> signals.Signal | None:
        return signals.get(self.scope, self.signal)

    @property
    def effective_clear_threshold(self) -> float:
        return self.threshold if self.clear_threshold is None else self.clear_threshold

    def param(self, name: str) -> Any:
        """A parameter of the rule, else the signal's default for it."""
        if name in self.params:
            return self.params[name]
        spec = self.signal_spec
        param = None if spec is None else spec.param(name)
        return None if param is None else param.default

    def breached(self, value: float) -> bool:
        """The value meets the rule's condition (an instance becomes pending)."""
        return COMPARISONS[self.comparison](value, self.threshold)

    def cleared(self, value: float) -> bool:
        """A firing instance resolves: the value no longer meets the condition against the
        clear threshold, so it must cross the hysteresis band, not just the threshold."""
        return not COMPARISONS[self.comparison](value, self.effective_clear_threshold)


class AlertState(models.TextChoices):
    PENDING = "pending", "Pending"
    FIRING = "firing", "Firing"
    RESOLVED = "resolved", "Resolved"


ACTIVE_STATES = (AlertState.PENDING, AlertState.FIRING)


class AlertInstance(models.Model):
    """One rule breached by one entity: pending → firing → resolved (or pending → resolved:
    dropped without firing). At most one active (pending or firing) instance per rule and
    entity; resolved ones stay as history, and a new breach opens a new instance."""

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="instances")
    scope = models.CharField(max_length=8, choices=RuleScopeChoices.choices)
    entity = models.CharField(max_length=64, help_text="the entity's key, e.g. '12:0' (node:gpu)")
    state = models.CharField(max_length=8, choices=AlertState.choices)
    value = models.FloatField(null=True, blank=True, help_text="the value at the last change")
    no_data = models.BooleanField(
        default=False, help_text="firing, but the signal has no value now (kept firing)"
    )
    labels = models.JSONField(
        default=dict,
        blank=True,
        help_text="the rule's labels, its name and severity and the entity's place names"
        " (site, hall, rack, node, gpu, loop, feed): what silences match; fixed at start",
    )
    # Where the entity is, fixed at start: maintenance windows and grouping use these.
    site = models.ForeignKey(
        "fleet.Site", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    rack = models.ForeignKey(
        "fleet.Rack", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    node = models.ForeignKey(
        "fleet.Node", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    loop = models.ForeignKey(
        "fleet.CoolingLoop",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="the loop itself, or the loop that cools the entity's rack",
    )
    group = models.ForeignKey(
        "AlertGroup",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="members",
        help_text="the notification it is announced in; set when it fires",
    )
    started_at = models.DateTimeField(help_text="first evaluation that saw the breach")
    fired_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField()
    # The notification claims (fleet/alerts/notify.py): set once, by a conditional UPDATE
    # `WHERE ... IS NULL`, by the evaluation that made the transition; whoever sets it sends.
    notified_firing_at = models.DateTimeField(null=True, blank=True, editable=False)
    notified_resolved_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Acknowledged: someone is on it. Stops repeats, never resolution (fleet/alerts/acks.py).
    acknowledged_at = models.DateTimeField(null=True, blank=True, editable=False)
    acknowledged_by = models.CharField(max_length=150, blank=True, editable=False)
    ack_comment = models.CharField(
        "acknowledgement", max_length=300, blank=True, help_text="who is on it, and why"
    )
    # Ended without its value clearing, because a worse state of its entity replaces it: a
    # lost GPU's thermal and throttle alerts end "superseded: GPU lost" (fleet/alerts/
    # consequences.py) instead of firing on no data.
    superseded_by = models.CharField(
        max_length=40, blank=True, editable=False, help_text="ended because of this, e.g. GPU lost"
    )

    class Meta:
        ordering = ("-started_at",)
        constraints = [
            models.UniqueConstraint(
                fields=("rule", "entity"),
                condition=models.Q(state__in=("pending", "firing")),
                name="alerts_one_active_instance_per_rule_entity",
            )
        ]
        indexes = [models.Index(fields=("state",), name="alerts_instance_state")]

    def __str__(self) -> str:
        return f"{self.rule_id}/{self.entity} {self.state}"


class AlertInstanceEvent(models.Model):
    """A change of an instance: state (from → to) or its no-data flag, with the value."""

    instance = models.ForeignKey(AlertInstance, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField()
    from_state = models.CharField(max_length=8, blank=True, help_text="blank: new instance")
    to_state = models.CharField(max_length=8, choices=AlertState.choices)
    value = models.FloatField(null=True, blank=True)
    no_data = models.BooleanField(default=False)
    superseded_by = models.CharField(
        max_length=40, blank=True, help_text="ended because of this state, e.g. GPU lost"
    )

    class Meta:
        ordering = ("at", "id")

    def __str__(self) -> str:
        return f"{self.from_state or 'new'} → {self.to_state}"


class AlertGroup(models.Model):
    """One notification thread: the instances announced together (fleet/alerts/grouping.py).

    Keyed by place and kind: a cooling loop's alerts and the thermal alerts of the GPUs it
    cools (`loop:<id>`); one rack's thermal alerts (`rack:<id>:thermal`), or one rule's
    alerts in a rack (`rack:<id>:<rule>`); a site's (`site:<id>`). Open while any member is
    pending or firing; the claims below (conditional UPDATEs) make each message go once."""

    key = models.CharField(max_length=120)
    site = models.ForeignKey(
        "fleet.Site", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    opened_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)
    first_sent_at = models.DateTimeField(null=True, blank=True, help_text="the firing message")
    last_sent_at = models.DateTimeField(null=True, blank=True, help_text="the latest message")
    resolved_sent_at = models.DateTimeField(null=True, blank=True)
    recovered_sent_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="the cause recovered while its consequences stay open: said once",
    )
    messages = models.PositiveIntegerField(default=0, help_text="messages sent about it")
    title = models.CharField(max_length=300, blank=True, help_text="as last announced")

    class Meta:
        ordering = ("-opened_at",)
        constraints = [
            models.UniqueConstraint(
                fields=("key",),
                condition=models.Q(closed_at__isnull=True),
                name="alerts_one_open_group_per_key",
            )
        ]

    def __str__(self) -> str:
        return self.title or self.key


class Mute(models.Model):
    """A time span in which some alerts are not notified, who set it and why."""

    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    created_by = models.CharField(max_length=150)
    comment = models.CharField(max_length=300)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True
        ordering = ("-ends_at",)


class Silence(Mute):
    """Mutes the notifications of every alert whose labels match all its matchers, from
    `starts_at` to `ends_at` (Alertmanager's silences). Instances still change state and
    keep history; a silence that ends while they fire lets them be announced then."""

    matchers = models.JSONField(
        help_text='all must match, e.g. [{"label": "rack", "op": "=", "value": "A01"},'
        ' {"label": "alertname", "op": "=~", "value": "gpu-.*"}]; ops: = != =~ !~'
    )

    def __str__(self) -> str:
        from fleet.alerts.muting import matchers_text

        return matchers_text(self.matchers)

    def clean(self) -> None:
        from fleet.alerts.muting import silence_errors

        errors = silence_errors(self.matchers, self.starts_at, self.ends_at)
        if errors:
            raise ValidationError(errors)


class MaintenanceWindow(Mute):
    """Planned work on one site, rack, node or cooling loop: its alerts are not notified
    meanwhile. A loop's window covers the loop and everything it cools (its racks' alerts
    carry its id), so work on a CDU mutes what that work will do to the racks."""

    site = models.ForeignKey("fleet.Site", null=True, blank=True, on_delete=models.CASCADE)
    rack = models.ForeignKey("fleet.Rack", null=True, blank=True, on_delete=models.CASCADE)
    node = models.ForeignKey("fleet.Node", null=True, blank=True, on_delete=models.CASCADE)
    loop = models.ForeignKey("fleet.CoolingLoop", null=True, blank=True, on_delete=models.CASCADE)

    def __str__(self) -> str:
        target = self.node or self.rack or self.loop or self.site
        return f"maintenance of {target}"

    def clean(self) -> None:
        errors: dict[str, str] = {}
        places = ("site", "rack", "node", "loop")
        chosen = [f for f in places if getattr(self, f"{f}_id") is not None]
        if len(chosen) != 1:
            errors["site"] = "choose exactly one of site, rack, node or cooling loop"
        if self.starts_at and self.ends_at and self.ends_at <= self.starts_at:
            errors["ends_at"] = "the window must end after it starts"
        if errors:
            raise ValidationError(errors)


class AlertEvaluation(models.Model):
    """A single row: the time of the last evaluation claimed. An evaluation claims its tick
    with a conditional UPDATE (`tick < now`) inside its transaction, so overlapping or
    redelivered evaluations run one after the other, or not at all (fleet/alerts/engine.py)."""

    tick = models.FloatField(default=0.0)
    last_duration_s = models.FloatField(default=0.0, help_text="how long the last pass took")
    # The pipeline's self-watch (fleet/alerts/watchdog.py): what it last announced, since
    # when it has been watching without a break, and when it last looked.
    watchdog_problem = models.CharField(max_length=300, blank=True)
    watchdog_since = models.DateTimeField(null=True, blank=True)
    watchdog_seen = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"evaluated at {self.tick}"
