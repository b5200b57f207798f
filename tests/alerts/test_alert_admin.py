"""Acknowledge, silences and maintenance windows in the admin: who did it is recorded, a
bad silence is refused with its reason, and nothing here can resolve an alert."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from fleet.alerts.acks import acknowledge
from fleet.alerts.models import (
    AlertEvaluation,
    AlertGroup,
    AlertInstance,
    AlertRule,
    MaintenanceWindow,
    Silence,
)
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import Rack
from tests.support import people

pytestmark = pytest.mark.django_db


fast_passwords = people.fast_passwords  # autouse


@pytest.fixture
def admin(client: Client) -> Client:
    User.objects.create_superuser("dana", "dana@example.com", "pw")
    client.login(username="dana", password="pw")
    return client


def firing_instance(state: str = "firing") -> AlertInstance:
    now = timezone.now()
    return AlertInstance.objects.create(
        rule=AlertRule.objects.get(key="gpu-hw-thermal-slowdown"),
        scope="gpu",
        entity="1:0",
        state=state,
        value=1.0,
        started_at=now,
        fired_at=now,
        updated_at=now,
    )


def test_acknowledging_in_the_admin_records_who_and_keeps_the_alert_firing(
    admin: Client,
) -> None:
    inst = firing_instance()
    url = reverse("admin:alerts_alertinstance_changelist")
    answer = admin.post(
        url, {"action": "acknowledge_selected", "_selected_action": [inst.pk]}, follow=True
    )
    assert "1 alert(s) acknowledged." in answer.content.decode()
    inst.refresh_from_db()
    assert inst.acknowledged_by == "dana" and inst.acknowledged_at is not None
    assert inst.state == "firing"


def test_an_acknowledgement_comment_on_the_change_page_is_recorded_with_the_user(
    admin: Client,
) -> None:
    inst = firing_instance()
    url = reverse("admin:alerts_alertinstance_change", args=[inst.pk])
    assert admin.get(url).status_code == 200
    admin.post(url, {"ack_comment": "replacing the cold plate", **_inline_management()})
    inst.refresh_from_db()
    assert (inst.acknowledged_by, inst.ack_comment) == ("dana", "replacing the cold plate")
    assert inst.state == "firing"


def _inline_management() -> dict[str, str]:
    prefix = "events"
    return {
        f"{prefix}-TOTAL_FORMS": "0",
        f"{prefix}-INITIAL_FORMS": "0",
        f"{prefix}-MIN_NUM_FORMS": "0",
        f"{prefix}-MAX_NUM_FORMS": "1000",
    }


def test_an_acknowledgement_needs_a_reason_and_skips_resolved_alerts() -> None:
    firing, resolved = firing_instance(), firing_instance("resolved")
    with pytest.raises(ValueError, match="needs a comment"):
        acknowledge([firing.pk], "dana", "   ")
    assert acknowledge([firing.pk, resolved.pk], "dana", "on it") == 1
    assert acknowledge([firing.pk], "lee", "me too") == 0  # the first one stands
    firing.refresh_from_db()
    assert firing.acknowledged_by == "dana"


def test_a_silence_is_added_with_its_author_and_a_bad_one_is_refused(admin: Client) -> None:
    url = reverse("admin:alerts_silence_add")
    now = timezone.now()
    form = {
        "starts_at_0": now.strftime("%Y-%m-%d"),
        "starts_at_1": now.strftime("%H:%M:%S"),
        "ends_at_0": (now + dt.timedelta(hours=2)).strftime("%Y-%m-%d"),
        "ends_at_1": (now + dt.timedelta(hours=2)).strftime("%H:%M:%S"),
        "comment": "fan swap in A04",
    }
    bad = admin.post(url, {**form, "matchers": '[{"label": "rack", "op": "==", "value": "A04"}]'})
    assert bad.status_code == 200
    assert "is not one of" in bad.content.decode()
    assert not Silence.objects.exists()
    good = admin.post(url, {**form, "matchers": '[{"label": "rack", "op": "=", "value": "A04"}]'})
    assert good.status_code == 302
    assert Silence.objects.get().created_by == "dana"
    assert admin.get(reverse("admin:alerts_silence_changelist")).status_code == 200


def test_a_maintenance_window_is_added_for_one_rack(admin: Client) -> None:
    seed_demo_site("lon1", DEMO_RACKS[3:4], gpus_per_node=1)
    rack = Rack.objects.get()
    url = reverse("admin:alerts_maintenancewindow_add")
    now = timezone.now()
    form = {
        "rack": str(rack.pk),
        "starts_at_0": now.strftime("%Y-%m-%d"),
        "starts_at_1": now.strftime("%H:%M:%S"),
        "ends_at_0": (now + dt.timedelta(hours=2)).strftime("%Y-%m-%d"),
        "ends_at_1": (now + dt.timedelta(hours=2)).strftime("%H:%M:%S"),
        "comment": "rack move",
    }
    assert admin.post(url, {**form, "node": ""}).status_code == 302
    window = MaintenanceWindow.objects.get()
    assert (window.rack, window.created_by) == (rack, "dana")
    both = admin.post(url, {**form, "site": str(rack.hall.site_id)})
    assert "choose exactly one of site, rack, node or cooling loop" in both.content.decode()


def test_alert_groups_are_listed_read_only(admin: Client) -> None:
    AlertGroup.objects.create(key="rack:1:thermal", opened_at=timezone.now(), title="A01 hot")
    answer = admin.get(reverse("admin:alerts_alertgroup_changelist"))
    assert "A01 hot" in answer.content.decode()
    assert admin.get(reverse("admin:alerts_alertgroup_add")).status_code == 403


def test_the_evaluation_heartbeat_is_shown(admin: Client) -> None:
    AlertEvaluation.objects.create(pk=1, tick=1_796_000_000.0, last_duration_s=0.42)
    answer = admin.get(reverse("admin:alerts_alertevaluation_changelist")).content.decode()
    assert "2026-11-30 00:53:20 UTC" in answer
    assert "0.42" in answer
