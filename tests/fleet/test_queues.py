"""Celery queues by job (fleetwatch/celery.py): every periodic task is routed to a queue
some worker is told to consume and expires before its next tick, and on real workers laid
out as `make demo` lays them out, neither a long rollup nor a Prometheus that stalls holds
up an alert evaluation or a Slack delivery."""

from __future__ import annotations

import contextlib
import itertools
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from fleet.alerts.models import AlertEvaluation
from fleet.models import PrometheusSource, Site
from fleet.notifications.models import Route
from fleet.storage.rollups import GRACE_S
from fleetwatch.celery import DEFAULT, MAINTENANCE, NOTIFICATIONS, PULL, QUEUES, RULES
from fleetwatch.celery import app as fleet_app
from fleetwatch.demo import ALERT_WORKER_QUEUES, celery_workers
from tests.support.alert_engine import only_inlet_rule
from tests.support.celery_proc import CeleryProc, producer, stopping
from tests.support.celery_workers import worker_env, workspace
from tests.support.databases import TierDb
from tests.support.slack_receiver import SlackReceiver
from tests.support.stalling import StallingListener


def queue_of(task: str) -> str:
    """The queue a task sent by name (as beat sends it) lands on."""
    route = fleet_app.amqp.router.route({}, task)
    return str(route["queue"].name)


def test_each_task_is_routed_to_the_queue_of_its_job() -> None:
    routed = {
        task: queue_of(task)
        for task in (
            "alerts.evaluate",
            "prometheus.pull",
            "notifications.deliver",
            "notifications.sweep",
            "fleet.rollup",
            "fleet.ledger",
            "fleet.retention",
            "fleet.partitions",
            "fleet.forecasts",
            "alerts.watchdog",
        )
    }
    assert routed == {
        "alerts.evaluate": RULES,
        # its own: a Prometheus that stalls must not hold up an evaluation
        "prometheus.pull": PULL,
        "notifications.deliver": NOTIFICATIONS,
        "notifications.sweep": NOTIFICATIONS,
        "fleet.rollup": MAINTENANCE,
        "fleet.ledger": MAINTENANCE,
        "fleet.retention": MAINTENANCE,
        "fleet.partitions": MAINTENANCE,
        # seconds per site: off the rules worker, whose passes must stay under a second
        "fleet.forecasts": MAINTENANCE,
        # not "rules": a stuck rules worker must not silence the watchdog
        "alerts.watchdog": DEFAULT,
    }
    assert queue_of("some.task.nobody.routed") == DEFAULT


def test_a_task_sent_to_a_queue_is_copied_into_no_other() -> None:
    # a direct exchange delivers to every queue bound with the message's routing key
    keys = [queue.routing_key for queue in fleet_app.conf.task_queues]
    assert keys == [queue.name for queue in fleet_app.conf.task_queues]


def test_every_scheduled_task_expires_before_its_next_tick_on_a_declared_queue() -> None:
    declared = {queue.name for queue in fleet_app.conf.task_queues}
    assert declared == set(QUEUES)
    schedule = fleet_app.conf.beat_schedule
    assert {entry["task"] for entry in schedule.values()} >= {
        "fleet.rollup",
        "fleet.ledger",
        "fleet.retention",
        "fleet.partitions",
        "fleet.forecasts",
        "alerts.evaluate",
        "alerts.watchdog",
        "notifications.sweep",
        "prometheus.pull",
    }
    for name, entry in schedule.items():
        assert entry["options"]["expires"] < float(entry["schedule"]), name
        assert queue_of(entry["task"]) in declared, name
    assert schedule["partitions"]["schedule"] == 600.0
    assert schedule["partitions"]["options"]["expires"] == 540


def test_the_demo_workers_consume_every_queue_and_pull_and_maintenance_alone() -> None:
    consumed = {
        name: argv[argv.index("--queues") + 1].split(",") for name, argv in celery_workers().items()
    }
    assert consumed == {
        "worker": [RULES, NOTIFICATIONS, DEFAULT],
        "pull": [PULL],
        "maintenance": [MAINTENANCE],
    }
    assert {queue for queues in consumed.values() for queue in queues} == set(QUEUES)


# -- on real workers ----------------------------------------------------------------------

GPUS_PER_NODE = 8
NODES = 32
BACKLOG_MIN = 100  # minutes of 2 s samples: ~770k raw rows, several seconds of rollup


@dataclass
class Layout:
    """The demo's two workers on one database and broker of the test's own."""

    db: TierDb
    sender: Celery
    maintenance: CeleryProc
    alerts: CeleryProc

    def log(self, proc: CeleryProc) -> str:
        return proc.log.read_text(errors="replace") if proc.log.exists() else ""

    def logs(self) -> str:
        return self.maintenance.tail() + "\n" + self.alerts.tail()

    def wait_for(self, what: str, check: Any, timeout: float = 60) -> float:
        """Poll until `check()`; the monotonic time it first held."""
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                pytest.fail(f"did not {what} in {timeout} s:\n{self.logs()}")
            time.sleep(0.05)
        return time.monotonic()

    def tick(self) -> float:
        row = AlertEvaluation.objects.using(self.db.alias).filter(pk=1).first()
        return 0.0 if row is None else row.tick


def insert_backlog(db: TierDb, minutes: int) -> int:
    """Raw GPU samples every 2 s for `minutes` complete minutes, written by the database
    itself (a recursive series works on both engines); the row count."""
    end = int((time.time() - GRACE_S - 5) // 60) * 60  # the last minute is one to roll up
    start = end - minutes * 60
    steps = minutes * 30
    db.execute(
        "WITH RECURSIVE step(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM step WHERE i < %s),"
        " gpu(g) AS (SELECT 0 UNION ALL SELECT g + 1 FROM gpu WHERE g < %s)"
        " INSERT INTO fw_gpu_raw (ts, node_id, gpu, util_gpu_pct, power_w)"
        " SELECT %s + step.i * 2, 1 + gpu.g / %s, gpu.g %% %s, (step.i %% 100) * 1.0, 500.0"
        " FROM step CROSS JOIN gpu",
        (steps - 1, NODES * GPUS_PER_NODE - 1, start, GPUS_PER_NODE, GPUS_PER_NODE),
    )
    return steps * NODES * GPUS_PER_NODE


def task_line(log: str, task: str, event: str) -> re.Match[str] | None:
    return re.search(rf"Task {re.escape(task)}\[[0-9a-f-]+\] {event}", log)


def logged_at(log: str, task: str, event: str) -> datetime:
    """When a worker logged `event` for `task` (its log line's own time stamp)."""
    found = re.search(
        rf"^\[([\d-]+ [\d:,]+): .*Task {re.escape(task)}\[[0-9a-f-]+\] {event}", log, re.M
    )
    assert found, f"no {task} {event} in:\n{log[-3000:]}"
    return datetime.strptime(found[1], "%Y-%m-%d %H:%M:%S,%f")


@pytest.fixture
def layout(
    tier: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, django_db_blocker: Any
) -> Iterator[Layout]:
    var_dir = tmp_path / "var"
    with workspace(tier, var_dir, tmp_path_factory, django_db_blocker) as (db, redis_url):
        env = worker_env(var_dir, db, redis_url)
        maintenance = CeleryProc.worker(
            env, var_dir / "maintenance.log", queues=[MAINTENANCE], name="maintenance"
        )
        alerts = CeleryProc.worker(
            env, var_dir / "alerts.log", queues=ALERT_WORKER_QUEUES, name="alerts"
        )
        sender = producer(tier, var_dir, redis_url)
        with contextlib.closing(sender), stopping(maintenance, alerts):
            yield Layout(db, sender, maintenance, alerts)


def test_a_long_rollup_does_not_delay_an_alert_evaluation(layout: Layout) -> None:
    rows = insert_backlog(layout.db, BACKLOG_MIN)
    assert layout.db.execute("SELECT count(*) FROM fw_gpu_raw")[0][0] == rows
    for proc in (layout.maintenance, layout.alerts):
        proc.start()
    for proc in (layout.maintenance, layout.alerts):
        layout.wait_for("start a worker", lambda p=proc: " ready." in layout.log(p))

    layout.sender.send_task("fleet.rollup", queue=queue_of("fleet.rollup"))
    layout.wait_for(
        "start the rollup",
        lambda: task_line(layout.log(layout.maintenance), "fleet.rollup", "received"),
    )
    layout.sender.send_task("alerts.evaluate", queue=queue_of("alerts.evaluate"))
    for proc, task in ((layout.alerts, "alerts.evaluate"), (layout.maintenance, "fleet.rollup")):
        layout.wait_for(
            f"finish {task}",
            lambda p=proc, t=task: task_line(layout.log(p), t, "succeeded"),
            timeout=180,
        )

    minutes = layout.db.execute("SELECT count(DISTINCT bucket) FROM fw_gpu_1m")[0][0]
    assert minutes == BACKLOG_MIN  # the rollup did the whole backlog
    # the evaluation ran on the alerts worker, the rollup alone on the other
    assert not task_line(layout.log(layout.maintenance), "alerts.evaluate", "received")
    assert not task_line(layout.log(layout.alerts), "fleet.rollup", "received")
    rollup_done = logged_at(layout.log(layout.maintenance), "fleet.rollup", "succeeded")
    evaluation = {
        event: logged_at(layout.log(layout.alerts), "alerts.evaluate", event)
        for event in ("received", "succeeded")
    }
    timeline = (
        f"rollup done {rollup_done:%T.%f}, evaluation received {evaluation['received']:%T.%f},"
        f" done {evaluation['succeeded']:%T.%f}"
    )
    # A worker busy with the rollup would take the evaluation only after it; and the
    # rollup's chunks must not keep the evaluation's writes out (on SQLite, one writer at
    # a time: the rollup pauses between chunks so a waiting writer gets in).
    assert evaluation["received"] < rollup_done, timeline
    assert evaluation["succeeded"] < rollup_done, timeline


# -- a Prometheus that stalls -------------------------------------------------------------

EVAL_S = 1  # FLEETWATCH_ALERT_EVAL_S
PULL_S = 1  # FLEETWATCH_PROMETHEUS_PULL_S: a pull sent every second, each one stuck
STUCK_S = 8.0  # watched while the pull waits on the listener (its query timeout is 10 s)
NODE_ID = 43


@dataclass
class StalledPull:
    """The demo's alert and pull workers and one beat on a database and broker of the
    test's own, a Prometheus source pointing at a listener that never answers, and a
    route to a local receiver that answers like Slack."""

    db: TierDb
    procs: list[CeleryProc]
    stall: StallingListener
    slack: SlackReceiver

    def logs(self) -> str:
        return "\n".join(proc.tail() for proc in self.procs)

    def tick(self) -> float:
        row = AlertEvaluation.objects.using(self.db.alias).filter(pk=1).first()
        return 0.0 if row is None else row.tick

    def wait_for(self, what: str, check: Any, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                pytest.fail(f"did not {what} in {timeout} s:\n{self.logs()}")
            time.sleep(0.05)


@pytest.fixture
def stalled_pull(
    tier: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, django_db_blocker: Any
) -> Iterator[StalledPull]:
    var_dir = tmp_path / "var"
    with (
        workspace(tier, var_dir, tmp_path_factory, django_db_blocker) as (db, redis_url),
        StallingListener() as stall,
        SlackReceiver() as slack,
    ):
        alias = db.alias
        site = Site.objects.using(alias).create(slug="stall", name="Stall")
        PrometheusSource.objects.using(alias).create(name="stalled", site=site, url=stall.url)
        only_inlet_rule(alias)
        Route.objects.using(alias).create(name="ops", webhook_url=slack.url("/ops"))
        env = worker_env(
            var_dir,
            db,
            redis_url,
            FLEETWATCH_ALERT_EVAL_S=str(EVAL_S),
            FLEETWATCH_PROMETHEUS_PULL_S=str(PULL_S),
        )
        # the demo's layout (fleetwatch/demo.py): the alert pipeline, the pull alone
        procs = [
            CeleryProc.worker(env, var_dir / "alerts.log", queues=ALERT_WORKER_QUEUES),
            CeleryProc.worker(env, var_dir / "pull.log", queues=[PULL]),
            CeleryProc.beat(env, var_dir / "beat.log", schedule=var_dir / "beat-schedule"),
        ]
        with stopping(*procs):
            yield StalledPull(db, procs, stall, slack)


def test_a_prometheus_that_stalls_delays_no_evaluation_tick_and_no_delivery(
    stalled_pull: StalledPull,
) -> None:
    run = stalled_pull
    for proc in run.procs:
        proc.start()
    # both workers up: the evaluations have begun and a pull hangs on the listener
    run.wait_for("evaluate once", lambda: run.tick() > 0)
    run.wait_for("send a pull to the stalled Prometheus", lambda: run.stall.held() > 0)
    watch_from = time.monotonic()
    run.db.store("node", (NODE_ID,), time.time(), temp_inlet_c=52.5)

    ticks: list[tuple[float, float]] = []  # (monotonic, tick) at each new tick seen
    held: list[int] = []  # pulls hanging on the listener, at each look
    while time.monotonic() < watch_from + STUCK_S:
        tick = run.tick()
        if not ticks or tick != ticks[-1][1]:
            ticks.append((time.monotonic(), tick))
        held.append(run.stall.held())
        time.sleep(0.05)
    messages = run.slack.received("/ops")
    stuck_share = sum(1 for n in held if n) / len(held)
    story = (
        f"ticks at {[round(t - watch_from, 2) for t, _ in ticks]} s,"
        f" a pull hanging {stuck_share:.0%} of the time, {run.stall.accepted} pulls seen"
    )

    # a pull hung nearly all the time (each hangs for its 10 s query timeout; the next
    # comes within a pull interval), on its own worker
    assert stuck_share >= 0.75, story
    # evaluations kept their cadence: a new tick about every second
    seen = [at for at, _ in ticks[1:]]
    assert len(seen) >= STUCK_S / EVAL_S - 3, story + "\n" + run.logs()
    gaps = [b - a for a, b in itertools.pairwise([watch_from, *seen])]
    assert max(gaps) < 3 * EVAL_S, story
    # and the alert's message reached "Slack" while the pull was still stuck
    texts = [str(m.body.get("text", "")) for m in messages]
    assert len(texts) == 1 and texts[0].startswith("CRITICAL: inlet 52.5 °C"), (
        f"{texts}\n{story}\n{run.logs()}"
    )
