"""Two REAL `celery beat` processes (the schedule of fleetwatch/celery.py, each with its own
schedule file) and two REAL workers (`-Q celery,rules`) on one database and one broker:
every tick is sent twice and taken by either worker, and a rule that fires for one entity
still sends exactly one message. (docs/operations.md: run exactly one beat. A second one,
by mistake or during a failover, must cost no more than skipped evaluations.)"""

from __future__ import annotations

from fleet.alerts.models import AlertInstance
from fleet.notifications.models import Delivery
from tests.support import celery_workers
from tests.support.alert_engine import firing
from tests.support.celery_workers import EVAL_S, Cluster
from tests.support.slack_receiver import SlackReceiver

cluster = celery_workers.celery_cluster  # a database and broker of the test's own


slack = celery_workers.slack_for_workers


def test_two_workers_and_two_beats_send_no_duplicate(
    cluster: Cluster, slack: SlackReceiver
) -> None:
    alias, path = cluster.db.alias, "/beats"
    cluster.hot_inlet(44, 61.0, receiver=slack, path=path)
    for proc in (cluster.worker(), cluster.worker(), cluster.beat(), cluster.beat()):
        proc.start()

    (message,) = slack.wait_for(path, 1)
    assert message.body["text"].startswith("CRITICAL: inlet 61.0 °C")
    # evaluated for at least three more intervals, the instance firing all along
    first = cluster.tick()
    cluster.wait_for("evaluate for 3 intervals", lambda: cluster.tick() >= first + 3 * EVAL_S)
    # a second message would be a second delivery row, written with its tick
    assert Delivery.objects.using(alias).count() == 1
    cluster.wait_for("deliver every message written", cluster.all_delivered)

    assert AlertInstance.objects.using(alias).get().state == "firing"
    assert len(firing(slack.received(path))) == 1
    assert len(slack.received(path)) == 1
    assert Delivery.objects.using(alias).count() == 1
    beats = [p.log.read_text() for p in cluster.procs if p.log.name.startswith("beat-")]
    for log in beats:  # both beats did send the ticks
        assert log.count("Sending due task alerts-evaluate") >= 3, cluster.logs()
