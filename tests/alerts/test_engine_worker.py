"""A REAL Celery worker (a `celery worker --pool solo` subprocess, over the broker of each
tier) runs `alerts.evaluate` sent by name, and an instance fires in its database; its
notice reaches a local receiver that answers like Slack, once."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from fleet.alerts.models import AlertEvaluation, AlertInstance, AlertRule
from fleet.notifications.models import Delivery, Route
from tests.fleet import test_celery_worker
from tests.support.slack_receiver import SlackReceiver

worker = test_celery_worker.worker  # the same module-scoped worker fixture
Worker = test_celery_worker.Worker


def test_worker_fires_an_instance_when_sent_alerts_evaluate(worker: Worker) -> None:
    alias = worker.db.alias
    AlertRule.objects.using(alias).update(enabled=False)
    AlertRule.objects.using(alias).create(
        key="inlet-hot",
        name="Inlet hot",
        scope="node",
        signal="temp_inlet_c",
        comparison="gt",
        threshold=30.0,
        severity="warning",
        summary="{node} inlet {value:.1f} °C",
    )
    now = time.time()
    worker.db.insert(
        "fw_node_latest",
        ("node_id", "ts", "temp_inlet_c", "temp_inlet_c_ts"),
        [(41, now, 38.5, now)],
    )

    worker.send("alerts.evaluate")

    firing = AlertInstance.objects.using(alias).filter(entity="41", state="firing")
    worker.wait_for("fire an instance", firing.exists)
    assert firing.get().value == 38.5


@pytest.fixture
def slack() -> Iterator[SlackReceiver]:
    with SlackReceiver() as receiver:
        yield receiver


def test_worker_evaluation_sends_exactly_one_slack_message(
    worker: Worker, slack: SlackReceiver
) -> None:
    alias = worker.db.alias
    AlertInstance.objects.using(alias).all().delete()  # the module's worker is shared
    AlertRule.objects.using(alias).update(enabled=False)
    Route.objects.using(alias).create(name="ops", webhook_url=slack.url("/ops"))
    AlertRule.objects.using(alias).create(
        key="inlet-very-hot",
        name="Inlet very hot",
        scope="node",
        signal="temp_inlet_c",
        comparison="gt",
        threshold=45.0,
        severity="critical",
        summary="inlet {value:.1f} °C",
    )
    now = time.time()
    worker.db.insert(
        "fw_node_latest",
        ("node_id", "ts", "temp_inlet_c", "temp_inlet_c_ts"),
        [(42, now, 50.5, now)],
    )

    worker.send("alerts.evaluate")
    deliveries = Delivery.objects.using(alias).filter(route__name="ops")
    worker.wait_for("write a delivery", deliveries.exists)
    # queued on commit to the default queue, which this worker does not consume: the
    # same task, sent to the worker's own queue by id
    worker.producer.send_task(
        "notifications.deliver", args=(deliveries.get().pk,), queue=worker.queue
    )
    (message,) = slack.wait_for("/ops", 1)
    assert message.body["text"].startswith("CRITICAL: inlet 50.5 °C")

    first = AlertEvaluation.objects.using(alias).get().tick
    worker.send("alerts.evaluate")  # later ticks, the instance still firing
    worker.send("alerts.evaluate")
    ticks = AlertEvaluation.objects.using(alias).filter(tick__gt=first)
    worker.wait_for("evaluate again", ticks.exists)
    time.sleep(1)
    assert deliveries.count() == 1
    assert len(slack.received("/ops")) == 1
