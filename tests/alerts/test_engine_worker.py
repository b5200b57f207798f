"""A REAL Celery worker (a `celery worker --pool solo` subprocess, over the broker of each
tier) runs `alerts.evaluate` sent by name, and an instance fires in its database; its
notice reaches a local receiver that answers like Slack, once. A firing alert outlives a
worker killed with SIGKILL and resolves with one message.

The workers and the cluster of workers and beats are tests/support/celery_workers.py."""

from __future__ import annotations

import time

from django.conf import settings

from fleet.alerts.models import AlertEvaluation, AlertInstance
from fleet.notifications.models import Delivery, Route
from tests.support import celery_workers
from tests.support.alert_engine import firing, only_inlet_rule
from tests.support.celery_workers import Cluster, Worker
from tests.support.slack_receiver import Received, SlackReceiver

worker = celery_workers.worker_on_own_queue  # shared by the module's tests


def inlet_now(worker: Worker, node: int, celsius: float) -> None:
    worker.db.store("node", (node,), time.time(), temp_inlet_c=celsius)


def test_worker_fires_an_instance_when_sent_alerts_evaluate(worker: Worker) -> None:
    alias = worker.db.alias
    only_inlet_rule(
        alias, threshold=30.0, severity="warning", summary="{node} inlet {value:.1f} °C"
    )
    inlet_now(worker, 41, 38.5)

    worker.send("alerts.evaluate")

    firing = AlertInstance.objects.using(alias).filter(entity="41", state="firing")
    worker.wait_for("fire an instance", firing.exists)
    assert firing.get().value == 38.5


slack = celery_workers.slack_for_workers


def test_worker_evaluation_sends_exactly_one_slack_message(
    worker: Worker, slack: SlackReceiver
) -> None:
    alias = worker.db.alias
    AlertInstance.objects.using(alias).all().delete()  # the module's worker is shared
    Route.objects.using(alias).create(name="ops", webhook_url=slack.url("/ops"))
    only_inlet_rule(alias, key="inlet-very-hot", threshold=45.0)
    inlet_now(worker, 42, 50.5)

    # The previous test's tick was moments ago, and a tick within half an interval of the
    # last one is skipped as a duplicate: evaluate as of just past that.
    last = AlertEvaluation.objects.using(alias).values_list("tick", flat=True).first() or 0.0
    at = max(time.time(), last + settings.ALERT_EVAL_S / 2 + 0.1)
    worker.producer.send_task("alerts.evaluate", kwargs={"now": at}, queue=worker.queue)
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
    # later ticks (a tick within half an interval of the last is skipped as a duplicate),
    # the instance still firing
    for later in (10, 20):
        worker.producer.send_task(
            "alerts.evaluate", kwargs={"now": first + later}, queue=worker.queue
        )
    ticks = AlertEvaluation.objects.using(alias).filter(tick__gt=first)
    worker.wait_for("evaluate again", ticks.exists)
    # delivery rows commit with the tick that wrote them (fleet/alerts/engine.py): a second
    # message would be a second row; once every row is delivered, nothing more can come
    assert deliveries.count() == 1
    worker.wait_for("deliver the message", lambda: deliveries.get().state == Delivery.DELIVERED)
    assert len(slack.received("/ops")) == 1


# ---------------------------------------------------------------------------
# workers (and beats) of the test's own, on the default queues

cluster = celery_workers.celery_cluster  # a database and broker of the test's own


def resolved(messages: list[Received]) -> list[str]:
    return [m.body["text"] for m in messages if m.body["text"].startswith("Resolved: ")]


def test_a_firing_alert_survives_a_worker_restart_and_resolves_once(
    cluster: Cluster, slack: SlackReceiver
) -> None:
    alias, path = cluster.db.alias, "/restart"
    cluster.hot_inlet(43, 52.5, receiver=slack, path=path)
    first = cluster.worker().start()
    cluster.evaluate()
    (message,) = slack.wait_for(path, 1)
    assert message.body["text"].startswith("CRITICAL: inlet 52.5 °C")
    instance = AlertInstance.objects.using(alias).get(entity="43")
    assert instance.state == "firing"

    first.kill()
    cluster.worker().start()
    cluster.inlet(43, 53.0)  # still hot
    cluster.evaluate()
    cluster.evaluate()
    assert AlertInstance.objects.using(alias).get().state == "firing"
    assert AlertInstance.objects.using(alias).get().pk == instance.pk
    assert Delivery.objects.using(alias).count() == 1  # no second message was written

    cluster.inlet(43, 25.0)  # cooled down
    cluster.evaluate()
    cluster.wait_for("send the resolved message", lambda: len(slack.received(path)) >= 2)
    assert AlertInstance.objects.using(alias).get().state == "resolved"
    cluster.evaluate()  # resolved stays resolved: nothing more to say
    # Rows commit with their tick, so after that evaluation the rows are final; the
    # resolved one is the last (the firing one may be left "sending" by the killed worker).
    states = Delivery.objects.using(alias).order_by("-pk").values_list("state", flat=True)
    cluster.wait_for("deliver the resolved message", lambda: states.first() == Delivery.DELIVERED)
    messages = slack.received(path)
    assert len(firing(messages)) == 1
    assert len(resolved(messages)) == 1
    assert resolved(messages)[0].startswith("Resolved: inlet")
    assert len(messages) == 2
    assert Delivery.objects.using(alias).count() == 2
