"""Deliveries sent by REAL Celery workers (two `celery worker --pool solo` subprocesses
on one queue), over kombu's filesystem transport + SQLite and over Redis + PostgreSQL,
to a local receiver that answers like Slack. Retries are re-queued tasks, never sleeps.
A worker killed mid-send (SIGKILL) is replaced, and the sweep hands its delivery on."""

from __future__ import annotations

import contextlib
import itertools
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from fleet.notifications.models import Delivery, Route
from fleet.notifications.notice import Notice
from fleet.notifications.slack import build_message
from tests.support import services
from tests.support.celery_proc import CeleryProc, producer, stopping
from tests.support.celery_workers import worker_env, workspace
from tests.support.databases import TierDb, fresh_db
from tests.support.server import FleetServer
from tests.support.slack_receiver import (
    CHANNEL_NOT_FOUND,
    OK,
    SERVER_ERROR,
    SlackReceiver,
    held,
    rate_limited,
)
from tests.support.waiting import wait_until


@dataclass
class Workers:
    db: TierDb
    producer: Celery
    queue: str
    logs: list[Path]

    def route(self, name: str, url: str) -> Route:
        return Route.objects.using(self.db.alias).create(name=name, webhook_url=url)

    def delivery(self, route: Route, title: str) -> Delivery:
        notice = Notice(kind="firing", severity="critical", title=title)
        return Delivery.objects.using(self.db.alias).create(
            route=route, kind="firing", severity="critical", title=title,
            message=build_message(notice),
        )  # fmt: skip

    def send(self, delivery: Delivery) -> str:
        """Queue a `notifications.deliver` task for it; the task's id."""
        task = self.producer.send_task(
            "notifications.deliver", args=[delivery.pk], queue=self.queue
        )
        return str(task.id)

    def settle(self, task_ids: list[str] | None = None) -> None:
        """Wait until every task (`task_ids`, else every one the workers received) has
        finished for good: a task re-queues itself until it is done, so one that has
        said "succeeded" can send nothing more. This is how an "exactly once" check
        waits past the latest a duplicate could come: a duplicate task finding the
        delivery taken looks again when the holder's lease ends (LEASE_S + 1 s here)."""

        def finished() -> bool:
            text = "\n".join(log.read_text() for log in self.logs)
            received = set(RECEIVED.findall(text)) if task_ids is None else set(task_ids)
            return received <= set(SUCCEEDED.findall(text))

        wait_until(finished, 60, "the deliver tasks finish", detail=self.tails)

    def tails(self) -> str:
        return "\n".join(log.read_text()[-2000:] for log in self.logs)

    def get(self, delivery: Delivery) -> Delivery:
        return Delivery.objects.using(self.db.alias).get(pk=delivery.pk)

    def wait_for_state(self, delivery: Delivery, state: str, timeout: float = 30) -> Delivery:
        deadline = time.monotonic() + timeout
        while (row := self.get(delivery)).state != state:
            if time.monotonic() > deadline:
                pytest.fail(f"delivery {delivery.pk} is {row.state}, not {state}:\n{self.tails()}")
            time.sleep(0.1)
        return row

    def tries(self, delivery: Delivery) -> list[tuple[int | None, str]]:
        rows = self.get(delivery).tries.using(self.db.alias).order_by("started_at")  # type: ignore[attr-defined]
        return [(t.http_status, t.outcome) for t in rows]


RECEIVED = re.compile(r"Task notifications\.deliver\[([0-9a-f-]+)\] received")
SUCCEEDED = re.compile(r"Task notifications\.deliver\[([0-9a-f-]+)\] succeeded")
# FLEETWATCH_DELIVERY_LEASE_S for these tests' workers (production: 30 s, past the 10 s send
# timeout). The receiver answers at once, so 2 s still outlasts every send; it bounds how
# long a duplicate task waits before it looks again and finds the delivery done.
LEASE_S = 2


@pytest.fixture(scope="module")
def slack() -> Iterator[SlackReceiver]:
    with SlackReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def workers(
    tier: str, tmp_path_factory: pytest.TempPathFactory, django_db_blocker: Any
) -> Iterator[Workers]:
    var_dir = tmp_path_factory.mktemp(f"notify-{tier}")
    queue = f"fwnotify-{uuid.uuid4().hex[:8]}"
    with fresh_db(tier, var_dir, tmp_path_factory, django_db_blocker) as db:
        redis_url = services.services_redis_url() if tier == "services" else None
        extra = {"FLEETWATCH_DELIVERY_LEASE_S": str(LEASE_S)}
        env = FleetServer(var_dir, database_url=db.url, redis_url=redis_url, extra_env=extra).env()
        env.pop("SLACK_WEBHOOK_URL", None)
        logs = [var_dir / f"worker-{n}.log" for n in (1, 2)]
        procs = [
            CeleryProc.worker(env, log, queues=[queue], name=f"{queue}-{n}").start()
            for n, log in enumerate(logs)
        ]
        sender = producer(tier, var_dir)
        try:
            with stopping(*procs):
                yield Workers(db, sender, queue, logs)
        finally:
            sender.close()
            if redis_url:
                import redis

                redis.Redis.from_url(redis_url).delete(f"_kombu.binding.{queue}", queue)


def test_a_429_is_retried_after_retry_after_and_delivered_once(
    workers: Workers, slack: SlackReceiver
) -> None:
    path = f"/{workers.db.tier}/ratelimited"
    slack.script(path, rate_limited(2), OK)
    delivery = workers.delivery(workers.route("rate", slack.url(path)), "429 then ok")
    task = workers.send(delivery)

    workers.wait_for_state(delivery, Delivery.DELIVERED)
    first, second = slack.received(path)
    assert second.at - first.at >= 2.0
    assert workers.tries(delivery) == [(429, "rate_limited"), (200, "delivered")]
    workers.settle([task])
    assert len(slack.received(path)) == 2  # exactly once delivered


def test_a_500_then_200_is_delivered_after_a_backoff(
    workers: Workers, slack: SlackReceiver
) -> None:
    path = f"/{workers.db.tier}/flaky"
    slack.script(path, SERVER_ERROR, OK)
    delivery = workers.delivery(workers.route("flaky", slack.url(path)), "500 then ok")
    workers.send(delivery)

    delivered = workers.wait_for_state(delivery, Delivery.DELIVERED)
    first, second = slack.received(path)
    assert second.at - first.at >= 2.0  # the first backoff step is 2–3 s
    assert workers.tries(delivery) == [(500, "transient"), (200, "delivered")]
    assert delivered.transient_failures == 1


def test_500_twice_then_200_is_delivered_exactly_once(
    workers: Workers, slack: SlackReceiver
) -> None:
    path = f"/{workers.db.tier}/flaky-twice"
    slack.script(path, SERVER_ERROR, SERVER_ERROR, OK)
    delivery = workers.delivery(workers.route("flaky-twice", slack.url(path)), "500, 500, ok")
    task = workers.send(delivery)

    delivered = workers.wait_for_state(delivery, Delivery.DELIVERED)
    first, second, third = slack.received(path)
    assert [r.status for r in (first, second, third)] == [500, 500, 200]
    assert second.at - first.at >= 2.0  # backoff: 2–3 s after the first failure
    assert third.at - second.at >= 4.0  # then 4–6 s after the second
    assert workers.tries(delivery) == [(500, "transient"), (500, "transient"), (200, "delivered")]
    assert (delivered.attempts, delivered.transient_failures) == (3, 2)
    workers.settle([task])
    assert [r.status for r in slack.received(path)] == [500, 500, 200]  # delivered once


def test_channel_not_found_fails_the_route_and_is_not_retried(
    workers: Workers, slack: SlackReceiver
) -> None:
    path, ops = f"/{workers.db.tier}/gone", f"/{workers.db.tier}/ops"
    # (the follow-up notice: "Slack route “gone” is failing: 404 channel_not_found")
    slack.script(path, CHANNEL_NOT_FOUND)
    broken = workers.route("gone", slack.url(path))
    workers.route("ops", slack.url(ops))
    delivery = workers.delivery(broken, "to a deleted channel")
    task = workers.send(delivery)

    failed = workers.wait_for_state(delivery, Delivery.FAILED)
    assert failed.last_error == "404 channel_not_found"
    broken = Route.objects.using(workers.db.alias).get(pk=broken.pk)
    assert (broken.state, broken.failing_reason) == (Route.FAILING, "404 channel_not_found")
    # Another working route is told (on the workers' own queue); which one is up to the
    # routes earlier tests left in this database, so look at every channel.
    wait_until(
        lambda: [r for r in slack.received() if "“gone” is failing" in r.body["text"]],
        15,
        "a route is told that “gone” is failing",
    )
    workers.settle([task])
    assert len(slack.received(path)) == 1
    assert workers.tries(delivery) == [(404, "permanent")]


def test_two_workers_send_each_delivery_once_a_second_apart(
    workers: Workers, slack: SlackReceiver
) -> None:
    path = f"/{workers.db.tier}/busy"
    busy = workers.route("busy", slack.url(path))
    deliveries = [workers.delivery(busy, f"alert {n}") for n in range(4)]
    # every task twice: duplicates must not double-send
    tasks = [workers.send(delivery) for delivery in deliveries * 2]

    for delivery in deliveries:
        workers.wait_for_state(delivery, Delivery.DELIVERED)
    workers.settle(tasks)
    arrived = slack.received(path)
    assert sorted(r.body["text"] for r in arrived) == sorted(
        f"CRITICAL: alert {n} (the whole fleet)" for n in range(4)
    )
    # Send slots are claimed 1 s apart; a POST then takes from a few ms to a few hundred on
    # a loaded box, so arrivals may come a little closer (Slack allows short bursts).
    gaps = [b.at - a.at for a, b in itertools.pairwise(arrived)]
    assert min(gaps) >= 0.7, gaps
    assert arrived[-1].at - arrived[0].at >= 2.5, gaps  # 4 messages: 3 slots apart, less jitter


def test_worker_logs_never_contain_a_webhook_url(workers: Workers, slack: SlackReceiver) -> None:
    port = slack.url("/").split(":")[2].split("/")[0]
    texts = [log.read_text() for log in workers.logs]
    assert any("notifications.deliver" in text for text in texts)  # they did send
    for text in texts:
        assert f"127.0.0.1:{port}" not in text


def test_a_worker_killed_mid_delivery_delivers_once_after_restart(
    tier: str,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    django_db_blocker: Any,
    slack: SlackReceiver,
) -> None:
    var_dir = tmp_path / "var"
    with workspace(tier, var_dir, tmp_path_factory, django_db_blocker) as (db, redis_url):
        env = worker_env(var_dir, db, redis_url, FLEETWATCH_DELIVERY_LEASE_S=str(LEASE_S))
        # on the default queue, where the sweep re-queues (a broker of this test's own)
        first, second = (
            CeleryProc.worker(env, var_dir / f"worker-{n}.log", queues=["celery"]) for n in (1, 2)
        )
        sender = producer(tier, var_dir, redis_url)
        ours = Workers(db, sender, "celery", [first.log, second.log])
        with stopping(first, second), contextlib.closing(sender):
            path = f"/{tier}/killed"
            slack.script(path, held(60))  # answered only if its sender is still there in 60 s
            delivery = ours.delivery(ours.route("killed", slack.url(path)), "sent as it dies")
            first.start()
            ours.send(delivery)
            slack.wait_for(path, 1)  # the POST is in flight, its answer held
            assert ours.get(delivery).state == Delivery.SENDING
            first.kill()
            second.start()

            # The killed sender's lease runs out; the sweep (beat: every 60 s) re-queues it.
            # Letting the lease run out is the behaviour under test, hence a sleep.
            lease_until = ours.get(delivery).lease_until
            assert lease_until is not None
            time.sleep(max(0.0, lease_until.timestamp() - time.time()) + 0.2)
            sender.send_task("notifications.sweep", queue="celery")

            delivered = ours.wait_for_state(delivery, Delivery.DELIVERED)
            # every task the live worker took (the sweep's hand-on) has finished; the
            # killed worker's own task comes back only after the broker's visibility
            # timeout (an hour), and would find the delivery done
            Workers(db, sender, "celery", [second.log]).settle()
            in_flight, resent = slack.received(path)  # the message reached the receiver twice
            assert not in_flight.answered  # the killed worker never heard an answer
            assert (resent.answered, resent.status) == (True, 200)
            assert resent.body == in_flight.body
            # the killed worker's try was never recorded: the log shows the one that worked
            assert ours.tries(delivery) == [(200, "delivered")]
            assert delivered.attempts == 1
