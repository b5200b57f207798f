"""The built-in fabric rules (InfiniBand/RoCE ports, docs/rules.md): part of the rule pack
(fleet/alerts/rulepack.py, `BUILTIN_RULES`)."""

from __future__ import annotations

from fleet.alerts.rulespec import RuleSpec

FABRIC_RULES: tuple[RuleSpec, ...] = ()
