"""Routing, claims, the per-webhook rate slot and what each Slack answer does to a
delivery and its route: the delivery functions called in-process, sending for real
to a local receiver that answers like Slack. (A real worker: test_delivery_worker.py.)"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from fleet.models import Site
from fleet.notifications.delivery import (
    MAX_TRANSIENT,
    attempt,
    claim,
    claim_send_slot,
    create_deliveries,
    routes_for,
)
from fleet.notifications.models import Delivery, Route
from fleet.notifications.notice import Notice
from fleet.notifications.slack import SlackWebhook
from fleet.notifications.tasks import send_notice
from tests.support.server import free_port
from tests.support.slack_receiver import (
    CHANNEL_NOT_FOUND,
    OK,
    SERVER_ERROR,
    SlackReceiver,
    rate_limited,
)

pytestmark = pytest.mark.django_db

HOT = Notice(kind="firing", severity="critical", title="GPU hot")


@pytest.fixture
def slack() -> Iterator[SlackReceiver]:
    with SlackReceiver() as receiver:
        yield receiver


def route(name: str, url: str, **fields: Any) -> Route:
    return Route.objects.create(name=name, webhook_url=url, **fields)


def delivery_to(target: Route, title: str = "GPU hot") -> Delivery:
    return Delivery.objects.create(
        route=target, kind="firing", severity="critical", title=title, message={"text": title}
    )


def later(seconds: float) -> Any:
    return timezone.now() + timedelta(seconds=seconds)


# -- routing ---------------------------------------------------------------


def test_routes_for_matches_site_and_minimum_severity(settings: Any) -> None:
    settings.SLACK_WEBHOOK_URL = ""
    lon = Site.objects.create(slug="lon1", name="London")
    ams = Site.objects.create(slug="ams1", name="Amsterdam")
    everywhere = route("all", "http://127.0.0.1:9/a", min_severity="warning")
    london = route("london", "http://127.0.0.1:9/b", site=lon, min_severity="info")
    route("amsterdam", "http://127.0.0.1:9/c", site=ams, min_severity="info")
    route("off", "http://127.0.0.1:9/d", enabled=False, min_severity="info")

    assert {r.name for r in routes_for(lon.pk, "critical")} == {"all", "london"}
    assert routes_for(lon.pk, "info") == [london]
    assert routes_for(None, "warning") == [everywhere]


def test_slack_webhook_url_is_the_route_when_no_other_matches(settings: Any) -> None:
    settings.SLACK_WEBHOOK_URL = "http://127.0.0.1:9/default"
    route("criticals only", "http://127.0.0.1:9/a", min_severity="critical")

    (default,) = routes_for(None, "warning")
    assert default.from_environment and default.post_url == settings.SLACK_WEBHOOK_URL
    settings.SLACK_WEBHOOK_URL = "http://127.0.0.1:9/moved"
    assert routes_for(None, "info")[0].post_url.endswith("/moved")
    assert Route.objects.filter(from_environment=True).count() == 1


def test_no_route_and_no_slack_webhook_url_means_no_delivery(settings: Any) -> None:
    settings.SLACK_WEBHOOK_URL = ""
    assert create_deliveries(HOT) == []


def test_the_delivery_row_is_written_before_the_task_is_queued(
    settings: Any, django_capture_on_commit_callbacks: Any, slack: SlackReceiver
) -> None:
    settings.SLACK_WEBHOOK_URL = slack.url("/default")
    with django_capture_on_commit_callbacks(execute=False) as queued:
        (delivery,) = send_notice(HOT)
    assert Delivery.objects.get(pk=delivery.pk).state == Delivery.PENDING
    assert len(queued) == 1  # the task goes out only once the row is committed
    assert slack.received() == []


# -- claims and the rate slot ------------------------------------------------


def test_two_claims_on_one_delivery_never_both_win(slack: SlackReceiver) -> None:
    delivery = delivery_to(route("ops", slack.url("/ops")))
    now = timezone.now()
    assert [claim(delivery.pk, now), claim(delivery.pk, now)] == [True, False]
    # and a claim whose sender died (lease over) can be taken again
    assert claim(delivery.pk, now + timedelta(minutes=5)) is True


def test_a_second_send_to_one_webhook_waits_for_the_next_slot(slack: SlackReceiver) -> None:
    ops = route("ops", slack.url("/ops"))
    now = timezone.now()
    assert claim_send_slot(ops.pk, now) == 0.0
    wait = claim_send_slot(ops.pk, now + timedelta(seconds=0.3))
    assert 0.7 <= wait <= 0.8
    assert claim_send_slot(ops.pk, now + timedelta(seconds=1)) == 0.0


def test_a_delivery_that_finds_the_slot_taken_is_rescheduled_not_sent(
    slack: SlackReceiver,
) -> None:
    ops = route("ops", slack.url("/ops"))
    first, second = delivery_to(ops, "one"), delivery_to(ops, "two")
    assert attempt(first.pk, SlackWebhook()).retry_in is None
    step = attempt(second.pk, SlackWebhook())
    assert step.retry_in is not None and 0 < step.retry_in <= 1.1
    assert [r.body["text"] for r in slack.received("/ops")] == ["one"]
    assert Delivery.objects.get(pk=second.pk).state == Delivery.PENDING


# -- what Slack's answers do --------------------------------------------------


def test_a_429_waits_retry_after_for_every_sender_to_that_webhook(slack: SlackReceiver) -> None:
    ops = route("ops", slack.url("/ops"))
    slack.script("/ops", rate_limited(7))
    delivery = delivery_to(ops)
    step = attempt(delivery.pk, SlackWebhook())
    assert step.retry_in == 7
    held = Route.objects.get(pk=ops.pk).next_send_at - timezone.now()
    assert timedelta(seconds=6) < held <= timedelta(seconds=7)
    assert Delivery.objects.get(pk=delivery.pk).tries.get().http_status == 429


def test_server_errors_back_off_then_fail_visibly_after_bounded_tries(
    slack: SlackReceiver,
) -> None:
    ops = route("ops", slack.url("/ops"))
    slack.script("/ops", *[SERVER_ERROR] * 20)
    delivery = delivery_to(ops)
    waits = []
    for n in range(MAX_TRANSIENT):
        step = attempt(delivery.pk, SlackWebhook(), now=later(1000 * (n + 1)))
        waits.append(step.retry_in)
    assert waits[-1] is None  # gave up
    backoff = [w for w in waits if w is not None]
    assert len(backoff) == MAX_TRANSIENT - 1
    assert backoff == sorted(backoff) and 2 <= backoff[0] <= 3
    failed = Delivery.objects.get(pk=delivery.pk)
    assert failed.state == Delivery.FAILED
    assert failed.last_error == f"gave up after {MAX_TRANSIENT} tries: 500 rollup_error"
    assert failed.tries.count() == MAX_TRANSIENT == len(slack.received("/ops"))
    assert Route.objects.get(pk=ops.pk).state == Route.OK  # Slack's trouble, not the route's


def test_no_answer_at_all_is_retried_like_a_server_error() -> None:
    dead = route("dead", f"http://127.0.0.1:{free_port()}/hook")
    delivery = delivery_to(dead)
    step = attempt(delivery.pk, SlackWebhook())
    assert step.retry_in is not None
    tried = Delivery.objects.get(pk=delivery.pk).tries.get()
    assert tried.http_status is None and "refused" in tried.error.lower()


def test_channel_not_found_fails_the_route_and_tells_another_route(slack: SlackReceiver) -> None:
    broken = route("broken", slack.url("/broken"))
    ops = route("ops", slack.url("/ops"))
    slack.script("/broken", CHANNEL_NOT_FOUND, CHANNEL_NOT_FOUND)
    step = attempt(delivery_to(broken).pk, SlackWebhook())

    assert step.retry_in is None
    broken.refresh_from_db()
    assert (broken.state, broken.failing_reason) == (Route.FAILING, "404 channel_not_found")
    (notice,) = step.follow_ups
    told = Delivery.objects.get(pk=notice)
    assert told.route == ops and "“broken” is failing: 404 channel_not_found" in told.title
    # a second failure on an already failing route does not tell anyone again
    assert attempt(delivery_to(broken).pk, SlackWebhook(), now=later(2)).follow_ups == []


def test_a_success_marks_a_failing_route_working_again(slack: SlackReceiver) -> None:
    ops = route("ops", slack.url("/ops"), state=Route.FAILING, failing_reason="410 x")
    slack.script("/ops", OK)
    attempt(delivery_to(ops).pk, SlackWebhook())
    ops.refresh_from_db()
    assert (ops.state, ops.failing_reason) == (Route.OK, "")


def test_a_finished_delivery_is_not_sent_again(slack: SlackReceiver) -> None:
    delivery = delivery_to(route("ops", slack.url("/ops")))
    attempt(delivery.pk, SlackWebhook())
    assert attempt(delivery.pk, SlackWebhook(), now=later(5)).retry_in is None
    assert len(slack.received("/ops")) == 1


def test_the_webhook_url_never_appears_in_logs(
    slack: SlackReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = slack.url("/T0001/B0001/secretsecret")
    slack.script("/T0001/B0001/secretsecret", rate_limited(1), SERVER_ERROR, CHANNEL_NOT_FOUND)
    dead = route("dead", f"http://127.0.0.1:{free_port()}/T0002/secretsecret")
    delivery = delivery_to(route("secret", secret))
    for n in range(3):
        attempt(delivery.pk, SlackWebhook(), now=later(100 * (n + 1)))
    attempt(delivery_to(dead).pk, SlackWebhook())
    assert "delivery" in caplog.text  # it did log
    assert "secretsecret" not in caplog.text
    assert "secretsecret" not in "".join(Delivery.objects.values_list("last_error", flat=True))


# -- admin --------------------------------------------------------------------


@pytest.fixture
def admin_client_logged_in(admin_user: Any) -> Client:
    client = Client()
    client.force_login(admin_user)
    return client


def test_admin_route_list_shows_the_webhook_shortened_never_in_full(
    admin_client_logged_in: Client,
) -> None:
    url = "https://hooks.slack.com/services/T000/B000/sEcReTsEcReTwxyz"
    route("ops", url, state=Route.FAILING, failing_reason="404 channel_not_found")
    page = admin_client_logged_in.get("/admin/notifications/route/").content.decode()
    assert "hooks.slack.com …wxyz" in page
    assert "sEcReT" not in page
    assert "Failing: 404 channel_not_found" in page


def test_admin_test_action_queues_a_test_delivery_and_says_so(
    admin_client_logged_in: Client, django_capture_on_commit_callbacks: Any
) -> None:
    ops = route("ops", "http://127.0.0.1:9/ops")
    with django_capture_on_commit_callbacks(execute=False) as queued:
        response = admin_client_logged_in.post(
            "/admin/notifications/route/",
            {"action": "send_test_message", "_selected_action": [ops.pk]},
            follow=True,
        )
    test = Delivery.objects.get(route=ops)
    assert (test.kind, test.state) == ("test", Delivery.PENDING)
    assert len(queued) == 1
    assert f"Test message to “ops” queued (delivery {test.pk})" in response.content.decode()


def test_admin_shows_deliveries_and_their_tries_read_only(
    admin_client_logged_in: Client, slack: SlackReceiver
) -> None:
    slack.script("/ops", rate_limited(3))
    delivery = delivery_to(route("ops", slack.url("/ops")), "GPU hot")
    attempt(delivery.pk, SlackWebhook())
    page = admin_client_logged_in.get(
        f"/admin/notifications/delivery/{delivery.pk}/change/"
    ).content.decode()
    assert "rate_limited" in page and "429" in page
    assert 'name="_save"' not in page  # view only
    assert admin_client_logged_in.get("/admin/notifications/delivery/add/").status_code == 403


def test_a_later_message_of_a_thread_waits_for_an_earlier_one_held_by_a_429(
    slack: SlackReceiver,
) -> None:
    ops = route("ops", slack.url("/ops"))
    slack.script("/ops", rate_limited(3))
    firing, resolved = (
        Delivery.objects.create(
            route=ops,
            thread="alert-group:7",
            kind=kind,
            severity="critical",
            title=kind,
            message={"text": kind},
        )
        for kind in ("firing", "resolved")
    )
    assert attempt(firing.pk, SlackWebhook()).retry_in == 3  # Slack said 429
    step = attempt(resolved.pk, SlackWebhook(), now=later(5))  # the slot is free again
    assert step.retry_in is not None  # but its firing message is not sent yet: it waits
    assert [r.body["text"] for r in slack.received("/ops")] == ["firing"]
    assert attempt(firing.pk, SlackWebhook(), now=later(5)).retry_in is None
    assert attempt(resolved.pk, SlackWebhook(), now=later(8)).retry_in is None
    assert [r.body["text"] for r in slack.received("/ops")] == ["firing", "firing", "resolved"]


def test_messages_of_other_threads_do_not_wait_for_each_other(slack: SlackReceiver) -> None:
    ops = route("ops", slack.url("/ops"))
    slack.script("/ops", rate_limited(3))
    first, other = (
        Delivery.objects.create(
            route=ops,
            thread=thread,
            kind="firing",
            severity="critical",
            title=thread,
            message={"text": thread},
        )
        for thread in ("alert-group:1", "alert-group:2")
    )
    attempt(first.pk, SlackWebhook())
    assert attempt(other.pk, SlackWebhook(), now=later(5)).retry_in is None
