"""REAL Celery workers (subprocesses) for tests, on a database of the test's own
(tests/support/databases.py) and each tier's broker.

`Worker`: one worker on a queue of its own, shared by a test module (fixture
`worker_on_own_queue`). `Cluster`: workers and beats on the default queues (`celery`,
`rules`), started and killed at will by one test (fixture `celery_cluster`). A module binds
the fixture it needs to the name its tests take (`cluster = celery_workers.celery_cluster`)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from fleet.alerts.models import AlertEvaluation
from fleet.notifications.models import Delivery, Route
from tests.support import services
from tests.support.alert_engine import only_inlet_rule
from tests.support.celery_proc import CeleryProc, private_broker, producer, stop_all
from tests.support.databases import TierDb, fresh_db
from tests.support.server import FleetServer
from tests.support.slack_receiver import SlackReceiver


@contextlib.contextmanager
def workspace(
    tier: str, var_dir: Path, factory: pytest.TempPathFactory, blocker: Any
) -> Iterator[tuple[TierDb, str | None]]:
    """A fresh migrated database on `tier` and a broker of the test's own (None: the
    embedded tier's filesystem transport in `var_dir`)."""
    with fresh_db(tier, var_dir, factory, blocker) as db, private_broker(tier) as redis_url:
        yield db, redis_url


def worker_env(var_dir: Path, db: TierDb, redis_url: str | None, **extra: str) -> dict[str, str]:
    """The environment of a worker on `db` and `redis_url`, with `extra` settings and no
    Slack webhook from the outer environment (a test routes its own)."""
    env = FleetServer(var_dir, database_url=db.url, redis_url=redis_url, extra_env=extra).env()
    env.pop("SLACK_WEBHOOK_URL", None)
    return env


@dataclass
class Worker:
    db: TierDb
    producer: Celery
    queue: str
    log: Path

    def send(self, name: str) -> None:
        self.producer.send_task(name, queue=self.queue)

    def wait_for(self, what: str, check: Callable[[], bool], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                pytest.fail(
                    f"worker did not {what} in {timeout} s:\n{self.log.read_text()[-3000:]}"
                )
            time.sleep(0.2)


@pytest.fixture(scope="module")
def worker_on_own_queue(
    tier: str, tmp_path_factory: pytest.TempPathFactory, django_db_blocker: Any
) -> Iterator[Worker]:
    var_dir = tmp_path_factory.mktemp(f"worker-{tier}")
    queue = f"fwtest-{uuid.uuid4().hex[:8]}"  # a queue of our own on a shared Redis
    with fresh_db(tier, var_dir, tmp_path_factory, django_db_blocker) as db:
        redis_url = services.services_redis_url() if tier == "services" else None
        env = FleetServer(var_dir, database_url=db.url, redis_url=redis_url).env()
        log = var_dir / "worker.log"
        proc = CeleryProc.worker(env, log, queues=[queue], name=queue).start()
        sender = producer(tier, var_dir)
        try:
            yield Worker(db, sender, queue, log)
        finally:
            proc.stop()
            sender.close()
            if redis_url:
                import redis

                redis.Redis.from_url(redis_url).delete(f"_kombu.binding.{queue}", queue)


# ---------------------------------------------------------------------------
# workers (and beats) of the test's own, on the default queues

EVAL_S = 1  # FLEETWATCH_ALERT_EVAL_S: a tick within 0.5 s of the last one is skipped


@dataclass
class Cluster:
    db: TierDb
    var_dir: Path
    env: dict[str, str]
    sender: Celery
    procs: list[CeleryProc] = field(default_factory=list)

    def worker(self) -> CeleryProc:
        log = self.var_dir / f"worker-{len(self.procs) + 1}.log"
        proc = CeleryProc.worker(self.env, log, queues=["celery", "rules"])
        self.procs.append(proc)
        return proc

    def beat(self) -> CeleryProc:
        n = len(self.procs) + 1
        schedule = self.var_dir / f"beat-{n}" / "schedule"  # a schedule file per beat
        schedule.parent.mkdir()
        proc = CeleryProc.beat(self.env, self.var_dir / f"beat-{n}.log", schedule=schedule)
        self.procs.append(proc)
        return proc

    def logs(self) -> str:
        return "\n".join(proc.tail() for proc in self.procs)

    def wait_for(self, what: str, check: Callable[[], bool], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                pytest.fail(f"did not {what} in {timeout} s:\n{self.logs()}")
            time.sleep(0.1)

    def all_delivered(self) -> bool:
        """Every message written is delivered: delivery rows commit with the tick that
        wrote them (fleet/alerts/engine.py), so after an evaluation has committed,
        nothing more can reach the receiver once these are sent."""
        return not undelivered(self.db.alias).exists()

    def tick(self) -> float:
        row = AlertEvaluation.objects.using(self.db.alias).filter(pk=1).first()
        return 0.0 if row is None else row.tick

    def evaluate(self) -> float:
        """Send `alerts.evaluate` as the beat does (queue "rules"); wait until a worker has
        evaluated it (committed); return its tick."""
        before = self.tick()
        # A tick within EVAL_S / 2 of the last is skipped as a duplicate (the engine's own
        # rule, under test elsewhere): let that much time pass, so this one is evaluated.
        time.sleep(max(0.0, before + EVAL_S / 2 + 0.1 - time.time()))
        self.sender.send_task("alerts.evaluate", queue="rules")
        self.wait_for("evaluate the rules", lambda: self.tick() > before)
        return self.tick()

    def hot_inlet(self, node: int, celsius: float, *, receiver: SlackReceiver, path: str) -> None:
        """Only one rule, over one node's inlet temperature, and a route to `path`."""
        only_inlet_rule(self.db.alias)
        Route.objects.using(self.db.alias).create(name="ops", webhook_url=receiver.url(path))
        self.db.store("node", (node,), time.time(), temp_inlet_c=celsius)

    def inlet(self, node: int, celsius: float) -> None:
        self.db.store("node", (node,), time.time(), temp_inlet_c=celsius)


@pytest.fixture
def celery_cluster(
    tier: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, django_db_blocker: Any
) -> Iterator[Cluster]:
    var_dir = tmp_path / "var"
    with workspace(tier, var_dir, tmp_path_factory, django_db_blocker) as (db, redis_url):
        env = worker_env(var_dir, db, redis_url, FLEETWATCH_ALERT_EVAL_S=str(EVAL_S))
        sender = producer(tier, var_dir, redis_url)
        found = Cluster(db, var_dir, env, sender)
        with contextlib.closing(sender):
            try:
                yield found
            finally:
                stop_all(found.procs)


def undelivered(alias: str) -> Any:
    """Delivery rows not sent yet (pending, or being sent)."""
    return Delivery.objects.using(alias).exclude(state__in=(Delivery.DELIVERED, Delivery.FAILED))


@pytest.fixture
def slack_for_workers() -> Iterator[SlackReceiver]:
    """A local receiver that answers like Slack; the workers reach it through a Route."""
    with SlackReceiver() as receiver:
        yield receiver
