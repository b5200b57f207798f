"""Alert rules in the admin: the pages render and an invalid rule is refused, with why."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from fleet.alerts.models import AlertRule
from tests.support import people

pytestmark = pytest.mark.django_db


fast_passwords = people.fast_passwords  # autouse


def form(**overrides: str) -> dict[str, str]:
    data = {
        "key": "hot-gpu",
        "name": "Hot GPU",
        "description": "",
        "enabled": "on",
        "scope": "gpu",
        "signal": "temp_gpu_c",
        "params": "{}",
        "comparison": "gt",
        "threshold": "85",
        "clear_threshold": "80",
        "for_duration": "00:05:00",
        "severity": "warning",
        "labels": "{}",
        "summary": "{node} GPU {gpu} at {value:.0f} °C",
        "runbook_url": "",
    }
    return {**data, **overrides}


def test_the_list_add_and_change_pages_render(admin_client: Client) -> None:
    assert admin_client.get(reverse("admin:alerts_alertrule_changelist")).status_code == 200
    add = admin_client.get(reverse("admin:alerts_alertrule_add"))
    assert add.status_code == 200
    rule = AlertRule.objects.get(key="gpu-hw-thermal-slowdown")
    change = admin_client.get(reverse("admin:alerts_alertrule_change", args=[rule.pk]))
    assert change.status_code == 200
    assert "HW thermal slowdown active (NVML 0x40)" in change.content.decode()


def test_a_valid_rule_is_saved(admin_client: Client) -> None:
    response = admin_client.post(reverse("admin:alerts_alertrule_add"), form())
    assert response.status_code == 302
    assert AlertRule.objects.get(key="hot-gpu").threshold == 85


def test_an_invalid_rule_is_refused_with_the_error_shown(admin_client: Client) -> None:
    response = admin_client.post(
        reverse("admin:alerts_alertrule_add"), form(clear_threshold="90", signal="flow_lpm")
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert "does not exist at gpu scope (only at loop)" in page
    assert not AlertRule.objects.filter(key="hot-gpu").exists()


def test_a_change_breaking_hysteresis_is_refused(admin_client: Client) -> None:
    rule = AlertRule.objects.get(key="rack-power-90")
    data = form(
        key=rule.key,
        scope="rack",
        signal="rack_power_fraction",
        comparison="ge",
        threshold="0.9",
        clear_threshold="0.95",
        summary="{rack}",
    )
    url = reverse("admin:alerts_alertrule_change", args=[rule.pk])
    page = admin_client.post(url, data).content.decode()
    assert "for an &#x27;above&#x27; rule the clear threshold must be ≤ the threshold" in page
    rule.refresh_from_db()
    assert rule.clear_threshold == 0.85
