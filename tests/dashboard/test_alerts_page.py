"""The alerts page: what fires, who acknowledged it, what is muted, where messages went
and every try; operators acknowledge with a reason, viewers only read and never see a
webhook."""

from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from fleet.alerts.models import AlertInstance, AlertRule, Silence
from fleet.notifications.models import Delivery, DeliveryAttempt, Route
from tests.support import people
from tests.support.people import viewer

pytestmark = pytest.mark.django_db

WEBHOOK = "https://hooks.slack.com/services/T000/B000/sEcReTtOkEn1234"


fast_passwords = people.fast_passwords  # autouse


def login(client: Client, name: str, *, operator: bool) -> Client:
    user = viewer(name)
    if operator:
        user.user_permissions.add(Permission.objects.get(codename="change_alertinstance"))
    client.login(username=name, password="pw")
    return client


def firing(entity: str = "1:0", labels: dict[str, str] | None = None) -> AlertInstance:
    now = timezone.now()
    return AlertInstance.objects.create(
        rule=AlertRule.objects.get(key="gpu-hw-thermal-slowdown"),
        scope="gpu",
        entity=entity,
        state="firing",
        value=1.0,
        labels=labels or {"site": "Demo", "rack": "A01", "node": "gpu-a01-01", "gpu": "0"},
        started_at=now,
        fired_at=now,
        updated_at=now,
    )


def sent_once() -> None:
    route = Route.objects.create(name="ops", webhook_url=WEBHOOK)
    Route.objects.filter(pk=route.pk).update(
        state=Route.FAILING, failing_reason="404 channel_not_found"
    )
    delivery = Delivery.objects.create(
        route=route, kind="firing", severity="critical", title="A01 hot", message={}
    )
    DeliveryAttempt.objects.create(
        delivery=delivery,
        started_at=timezone.now(),
        http_status=429,
        error="rate_limited",
        duration_ms=12,
        outcome="rate_limited",
    )


def test_the_page_lists_firing_alerts_muted_ones_and_the_delivery_log(client: Client) -> None:
    firing()
    firing("2:0", {"site": "Demo", "rack": "A04", "node": "gpu-a04-01", "gpu": "0"})
    Silence.objects.create(
        matchers=[{"label": "rack", "op": "=", "value": "A04"}],
        starts_at=timezone.now() - dt.timedelta(minutes=1),
        ends_at=timezone.now() + dt.timedelta(hours=1),
        created_by="dana",
        comment="fan swap",
    )
    sent_once()
    page = login(client, "vic", operator=False).get("/alerts/").content.decode()
    assert "2 firing" in page and "1 muted" in page
    assert "Demo / A01 / gpu-a01-01 / GPU 0" in page
    assert "silence " in page and 'rack="A04"' in page.replace("&quot;", '"')
    assert "failing since" in page and "404 channel_not_found" in page
    assert "429 rate_limited" in page


def test_a_viewer_sees_no_webhook_and_cannot_acknowledge(client: Client) -> None:
    inst = firing()
    sent_once()
    viewer = login(client, "vic", operator=False)
    page = viewer.get("/alerts/").content.decode()
    assert "sEcReT" not in page and "hooks.slack.com" not in page
    assert "Acknowledge selected" not in page
    answer = viewer.post("/alerts/acknowledge", {"alert": inst.pk, "comment": "mine"})
    assert answer.status_code == 403
    inst.refresh_from_db()
    assert inst.acknowledged_at is None


def test_an_operator_acknowledges_with_a_reason_and_the_page_says_who(client: Client) -> None:
    inst = firing()
    sent_once()
    operator = login(client, "dana", operator=True)
    page = operator.get("/alerts/").content.decode()
    assert "hooks.slack.com …1234" in page and "sEcReT" not in page  # redacted, never whole
    refused = operator.post("/alerts/acknowledge", {"alert": inst.pk, "comment": " "}, follow=True)
    assert "needs a comment" in refused.content.decode()
    done = operator.post(
        "/alerts/acknowledge", {"alert": inst.pk, "comment": "swapping the pump"}, follow=True
    )
    assert "1 alert(s) acknowledged" in done.content.decode()
    assert "dana: swapping the pump" in done.content.decode()
    inst.refresh_from_db()
    assert inst.state == "firing" and inst.acknowledged_by == "dana"


def test_acknowledge_refuses_a_bad_id_and_a_get(client: Client) -> None:
    operator = login(client, "dana", operator=True)
    assert operator.post("/alerts/acknowledge", {"alert": "x", "comment": "a"}).status_code == 400
    assert operator.get("/alerts/acknowledge").status_code == 405


def test_the_page_needs_a_login(client: Client) -> None:
    answer = client.get("/alerts/")
    assert answer.status_code == 302 and "/login" in answer["Location"]


def test_each_alert_links_to_the_page_of_what_breached(client: Client) -> None:
    from dataclasses import replace

    from fleet.demo import DEMO_RACKS, seed_demo_site
    from fleet.models import GPU, Node

    seed_demo_site("demo", tuple(replace(p, nodes=1) for p in DEMO_RACKS[:1]), 2)
    node = Node.objects.get()
    gpu = GPU.objects.get(node=node, index=1)
    firing(entity=f"{node.pk}:1")
    page = login(client, "dana", operator=False).get("/alerts/").content.decode()
    assert f'href="/gpus/{gpu.pk}/"' in page


def test_the_live_part_is_the_region_alone_with_the_persons_own_controls(client: Client) -> None:
    firing()
    operator = login(client, "olga", operator=True)
    part = operator.get("/alerts/?part=live").content.decode()
    assert "<html" not in part and "<h1>Alerts" in part
    assert 'name="alert"' in part and "csrfmiddlewaretoken" in part
    viewer = login(Client(), "vera", operator=False)
    assert 'name="alert"' not in viewer.get("/alerts/?part=live").content.decode()
