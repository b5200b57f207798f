"""Installing the built-in rule pack by stable key, keeping an operator's edits.

Per built-in rule and field, a three-way merge against the pack's values as last
installed (`AlertRule.pack_values`): unedited fields follow the new pack, edited ones
stay. Works on the historical model too, so a data migration can call it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import models, transaction

from fleet.alerts.rulepack import BUILTIN_RULES
from fleet.alerts.rulespec import RuleSpec
from fleet.alerts.validation import rule_errors


@dataclass
class InstallReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)  # a pack change reached the rule
    unchanged: list[str] = field(default_factory=list)
    kept: dict[str, list[str]] = field(default_factory=dict)  # key -> fields edited, kept
    refused: dict[str, str] = field(default_factory=dict)  # key -> why it was left alone

    def lines(self) -> list[str]:
        out = [
            f"{len(self.created)} created, {len(self.updated)} updated, "
            f"{len(self.unchanged)} unchanged"
        ]
        out += [f"{key}: kept your {', '.join(f)}" for key, f in sorted(self.kept.items())]
        out += [f"{key}: left alone, {why}" for key, why in sorted(self.refused.items())]
        return out


def _plain(value: Any) -> Any:
    return value.total_seconds() if isinstance(value, dt.timedelta) else value


def _field_value(name: str, plain: Any) -> Any:
    return dt.timedelta(seconds=plain) if name == "for_duration" else plain


def install_rule_pack(
    model: type[models.Model] | None = None, specs: Iterable[RuleSpec] = BUILTIN_RULES
) -> InstallReport:
    """Create missing built-in rules and bring unedited fields of the others up to date."""
    if model is None:
        from fleet.alerts.models import AlertRule

        model = AlertRule
    report = InstallReport()
    with transaction.atomic():
        for spec in specs:
            _install_one(model, spec, report)
    return report


def _install_one(model: type[models.Model], spec: RuleSpec, report: InstallReport) -> None:
    # Only fields this version of the model has: a migration passes a historical model.
    names = {f.name for f in model._meta.get_fields()}
    new = {k: v for k, v in spec.values().items() if k in names}
    rule: Any = model._default_manager.filter(key=spec.key).first()
    if rule is None:
        fields = {k: _field_value(k, v) for k, v in new.items()}
        model._default_manager.create(key=spec.key, builtin=True, pack_values=new, **fields)
        report.created.append(spec.key)
        return
    if not rule.builtin:
        report.refused[spec.key] = "an operator's rule already has this key"
        return
    old, changed, kept = rule.pack_values or {}, False, []
    for name, value in new.items():
        current = _plain(getattr(rule, name))
        if name in old and current != old[name]:
            kept.append(name)  # edited since the last install: the operator's value wins
        elif current != value:
            setattr(rule, name, _field_value(name, value))
            changed = True
    if kept:
        report.kept[spec.key] = kept
    if errors := rule_errors(rule):
        report.refused[spec.key] = "the merge would not validate: " + "; ".join(
            f"{k}: {v}" for k, v in errors.items()
        )
        return
    if changed or old != new:
        rule.pack_values = new
        rule.save()
    (report.updated if changed else report.unchanged).append(spec.key)
