"""The built-in pack installs by key, idempotently, and keeps an operator's edits."""

from __future__ import annotations

import datetime as dt
import io
from dataclasses import replace

import pytest
from django.core.management import call_command

from fleet.alerts.install import install_rule_pack
from fleet.alerts.models import AlertRule
from fleet.alerts.rulepack import BUILTIN_RULES
from fleet.alerts.validation import rule_errors

pytestmark = pytest.mark.django_db
KEYS = {spec.key for spec in BUILTIN_RULES}


def test_every_built_in_rule_validates() -> None:
    for spec in BUILTIN_RULES:
        assert rule_errors(spec) == {}, spec.key


def test_built_in_keys_are_unique() -> None:
    assert len(KEYS) == len(BUILTIN_RULES)


def test_migrate_has_installed_the_pack() -> None:
    assert set(AlertRule.objects.filter(builtin=True).values_list("key", flat=True)) == KEYS


def test_installed_rules_pass_model_validation() -> None:
    for rule in AlertRule.objects.filter(builtin=True):
        rule.full_clean()


def test_it_installs_into_an_empty_table() -> None:
    AlertRule.objects.all().delete()
    report = install_rule_pack()
    assert set(report.created) == KEYS
    assert AlertRule.objects.count() == len(KEYS)


def test_a_second_install_changes_nothing() -> None:
    before = {r.key: r.updated for r in AlertRule.objects.all()}
    report = install_rule_pack()
    assert report.created == [] and report.updated == []
    assert set(report.unchanged) == KEYS
    assert {r.key: r.updated for r in AlertRule.objects.all()} == before


def test_a_reinstall_keeps_an_edited_threshold_and_updates_the_rest() -> None:
    rule = AlertRule.objects.get(key="rack-power-90")
    rule.threshold, rule.clear_threshold = 0.92, 0.88
    rule.save()
    newer = [
        replace(s, for_s=600, summary="{rack}: {value:.0%} of budget")
        if s.key == "rack-power-90"
        else s
        for s in BUILTIN_RULES
    ]
    report = install_rule_pack(specs=newer)
    rule.refresh_from_db()
    assert (rule.threshold, rule.clear_threshold) == (0.92, 0.88)  # the operator's
    assert rule.for_duration == dt.timedelta(minutes=10)  # unedited: follows the pack
    assert rule.summary == "{rack}: {value:.0%} of budget"
    assert report.kept["rack-power-90"] == ["threshold", "clear_threshold"]
    assert "rack-power-90" in report.updated


def test_a_reinstall_keeps_a_disabled_rule_disabled() -> None:
    AlertRule.objects.filter(key="site-pue-above-target").update(enabled=False)
    install_rule_pack()
    assert not AlertRule.objects.get(key="site-pue-above-target").enabled


def test_a_reinstall_restores_a_deleted_built_in_rule() -> None:
    AlertRule.objects.filter(key="loop-leak").delete()
    assert install_rule_pack().created == ["loop-leak"]


def test_a_merge_that_would_not_validate_leaves_the_rule_alone() -> None:
    # The operator tightened the clear threshold; a newer pack lowers the threshold under it.
    AlertRule.objects.filter(key="rack-power-90").update(clear_threshold=0.89)
    newer = [replace(s, threshold=0.80) if s.key == "rack-power-90" else s for s in BUILTIN_RULES]
    report = install_rule_pack(specs=newer)
    rule = AlertRule.objects.get(key="rack-power-90")
    assert rule.threshold == 0.90
    assert "clear_threshold" in report.refused["rack-power-90"]


def test_it_never_takes_over_an_operators_rule_with_a_built_in_key() -> None:
    AlertRule.objects.filter(key="loop-leak").update(builtin=False, threshold=2)
    report = install_rule_pack()
    assert "loop-leak" in report.refused
    assert AlertRule.objects.get(key="loop-leak").threshold == 2


def test_the_command_reports_what_it_did() -> None:
    out = io.StringIO()
    call_command("install_rule_pack", stdout=out)
    assert f"0 created, 0 updated, {len(KEYS)} unchanged" in out.getvalue()
