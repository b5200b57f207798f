"""Checks of an alert rule, as pure functions: each returns errors keyed by the field
they concern, so the admin shows every fault next to its field at once."""

from __future__ import annotations

import datetime as dt
import re
import string
from collections.abc import Mapping
from typing import Any, Protocol

from agents.protocol.metrics import metric_names
from fleet.alerts import signals
from fleet.alerts.choices import RuleComparisonChoices, RuleScopeChoices

LABEL_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")  # Prometheus label names, lower case
# Labels the engine sets on every instance; a rule may not override them.
RESERVED_LABELS = frozenset({"alertname", "rule", "severity", "scope", "entity"})

Errors = dict[str, str]


class RuleLike(Protocol):
    """The fields validation reads (an AlertRule, or a built-in rule spec)."""

    # Read-only properties, so a model's narrower field types satisfy them.
    @property
    def scope(self) -> str: ...
    @property
    def signal(self) -> str: ...
    @property
    def comparison(self) -> str: ...
    @property
    def threshold(self) -> float | None: ...
    @property
    def clear_threshold(self) -> float | None: ...
    @property
    def for_duration(self) -> dt.timedelta | None: ...
    @property
    def labels(self) -> Any: ...
    @property
    def summary(self) -> str: ...
    @property
    def params(self) -> Any: ...


def rule_errors(rule: RuleLike) -> Errors:
    """Every fault of `rule`, at most one per field."""
    errors: Errors = {}
    signal = _signal_errors(rule, errors)
    _clear_errors(rule, errors)
    if rule.for_duration is not None and rule.for_duration < dt.timedelta(0):
        errors["for_duration"] = "the for-duration cannot be negative"
    if (msg := labels_error(rule.labels)) is not None:
        errors["labels"] = msg
    if (msg := summary_error(rule.summary, signals.placeholders(rule.scope, signal))) is not None:
        errors["summary"] = msg
    if signal is not None and (msg := params_error(rule.params, signal)) is not None:
        errors["params"] = msg
    return errors


def _signal_errors(rule: RuleLike, errors: Errors) -> signals.Signal | None:
    if rule.scope not in RuleScopeChoices.values:
        return None  # the field's own choices validation names it
    signal = signals.get(rule.scope, rule.signal)
    if signal is not None:
        return signal
    elsewhere = signals.scopes_of(rule.signal)
    if elsewhere:
        errors["signal"] = (
            f"{rule.signal!r} does not exist at {rule.scope} scope (only at {', '.join(elsewhere)})"
        )
    else:
        errors["signal"] = f"unknown signal {rule.signal!r} (see the signal catalogue)"
    return None


def _clear_errors(rule: RuleLike, errors: Errors) -> None:
    clear, threshold = rule.clear_threshold, rule.threshold
    if clear is None or threshold is None:
        return
    # Hysteresis: an instance keeps firing until the value crosses the clear threshold,
    # so the clear threshold must sit on the healthy side of the threshold.
    if rule.comparison in RuleComparisonChoices.rising() and clear > threshold:
        errors["clear_threshold"] = (
            f"for an 'above' rule the clear threshold must be ≤ the threshold ({threshold:g})"
        )
    elif rule.comparison in RuleComparisonChoices.values and (
        rule.comparison not in RuleComparisonChoices.rising() and clear < threshold
    ):
        errors["clear_threshold"] = (
            f"for a 'below' rule the clear threshold must be ≥ the threshold ({threshold:g})"
        )


def labels_error(labels: Any) -> str | None:
    """Labels identify and route an instance: a flat map of names to strings."""
    if not isinstance(labels, Mapping):
        return "labels must be a JSON object of name: value"
    for name, value in labels.items():
        if not isinstance(name, str) or not LABEL_NAME.match(name):
            return f"label name {name!r} must be lower-case letters, digits and _"
        if name in RESERVED_LABELS:
            return f"label {name!r} is set by the engine"
        if not isinstance(value, str):
            return f"label {name!r} must have a string value"
    return None


def summary_error(summary: str, allowed: frozenset[str]) -> str | None:
    """A `{placeholder}` template: names from `allowed` only, and it must render."""
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(summary) if name is not None]
    except ValueError as exc:
        return f"summary is not a valid template: {exc}"
    for name in fields:
        if name not in allowed:
            known = ", ".join(sorted(allowed))
            return f"unknown placeholder {{{name}}} (known here: {known})"
    try:
        summary.format(**dict.fromkeys(allowed, 1.0))
    except (ValueError, TypeError) as exc:
        return f"summary does not render: {exc}"
    return None


def params_error(params: Any, signal: signals.Signal) -> str | None:
    """Parameters must be ones the signal declares, each of its type."""
    if not isinstance(params, Mapping):
        return "params must be a JSON object"
    for name, value in params.items():
        param = signal.param(name)
        if param is None:
            declared = ", ".join(p.name for p in signal.params) or "none"
            return f"{signal.name} takes no parameter {name!r} (it takes: {declared})"
        if (msg := _param_type_error(param, value, signal.scope)) is not None:
            return f"{name}: {msg}"
    return None


def _param_type_error(param: signals.Param, value: Any, scope: str) -> str | None:
    if param.type == "float":
        ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
        return None if ok else "must be a positive number"
    if param.type == "site_map":
        ok = isinstance(value, Mapping) and all(
            isinstance(v, int | float) and not isinstance(v, bool) and v > 0 for v in value.values()
        )
        return None if ok else "must map site slugs to positive numbers"
    if not isinstance(value, list):
        return "must be a list"
    if param.type == "int_list":
        ok = all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        return None if ok else "must be a list of integers"
    known = set(metric_names(signals.SCOPE_SAMPLE_KIND[scope]))
    unknown = [v for v in value if v not in known]
    return f"unknown metric(s) at this scope: {unknown}" if unknown else None
