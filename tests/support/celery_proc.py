"""Real Celery processes for tests: `celery -A fleetwatch worker` (`--pool solo`) and
`celery -A fleetwatch beat` subprocesses that a test can start, kill (SIGKILL, as a crash
or an OOM kill would) and start again, and a producer that sends them tasks by name.

    with private_broker(tier) as redis_url:    # None: the filesystem transport
        env = FleetServer(var_dir, database_url=db.url, redis_url=redis_url).env()
        worker = CeleryProc.worker(env, var_dir / "worker.log", queues=QUEUES)
        worker.start() ... worker.kill() ... worker.start()   # the same command, again
        producer(tier, var_dir, redis_url).send_task("alerts.evaluate", queue="rules")

The embedded tier's broker is kombu's filesystem transport in the test's own var dir; the
services tier's is the shared Redis (a queue of the test's own), or, for tests whose
processes use the default queues (`celery`, `rules`: beat, the sweep, notices queued by
the engine), a Redis database number of their own (`private_broker`).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

from celery import Celery

from fleetwatch.celery import DEFAULT, MAINTENANCE, NOTIFICATIONS, QUEUES
from tests.support import services
from tests.support.server import ROOT

__all__ = ("QUEUES", "CeleryProc", "private_broker", "producer", "stop_all", "stopping")

SPLIT_FROM_DEFAULT = (NOTIFICATIONS, MAINTENANCE)


def consumed(queues: Sequence[str]) -> list[str]:
    """The queues a worker given `queues` consumes: a list from before the split (the
    default queue, none of those split out of it) brings those too (module docstring)."""
    before_split = DEFAULT in queues and not set(SPLIT_FROM_DEFAULT) & set(queues)
    return list(dict.fromkeys((*queues, *(SPLIT_FROM_DEFAULT if before_split else ()))))


class CeleryProc:
    """One `celery -A fleetwatch …` subprocess, restartable; output appended to `log`."""

    def __init__(self, args: Sequence[str], env: dict[str, str], log: Path) -> None:
        self.args = [sys.executable, "-m", "celery", "-A", "fleetwatch", *args]
        self.env = env
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def worker(
        cls, env: dict[str, str], log: Path, *, queues: Sequence[str], name: str = ""
    ) -> CeleryProc:
        name = name or f"fwtest-{uuid.uuid4().hex[:8]}"
        return cls(
            [
                *("worker", "--pool", "solo", "-Q", ",".join(consumed(queues))),
                *("-n", f"{name}@%h"),
                *("-l", "info", "--without-mingle", "--without-gossip", "--without-heartbeat"),
            ],
            env,
            log,
        )

    @classmethod
    def beat(cls, env: dict[str, str], log: Path, *, schedule: Path) -> CeleryProc:
        """A beat with its own schedule file (two beats must not share one)."""
        return cls(["beat", "-s", str(schedule), "-l", "info"], env, log)

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def start(self) -> CeleryProc:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.args, env=self.env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
            )
        return self

    def kill(self) -> None:
        """SIGKILL: no warm shutdown, nothing acknowledged or restored on the way out."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()

    def terminate(self) -> None:
        """SIGTERM (a warm shutdown), without waiting for it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM (a warm shutdown), SIGKILL if that takes longer than `timeout`."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def tail(self, chars: int = 3000) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return f"--- {self.log.name} ---\n{text[-chars:]}"


def stop_all(procs: Sequence[CeleryProc]) -> None:
    for proc in procs:
        proc.terminate()  # all at once: each warm shutdown takes a moment
    for proc in procs:
        proc.stop()


@contextlib.contextmanager
def stopping(*procs: CeleryProc) -> Iterator[None]:
    """Stop every process on the way out, whatever happened."""
    try:
        yield
    finally:
        stop_all(procs)


def producer(tier: str, var_dir: Path, redis_url: str | None = None) -> Celery:
    """A sender configured like the processes' settings (fleetwatch/settings.py)."""
    if tier == "services":
        return Celery("fwtest-sender", broker=redis_url or services.services_redis_url())
    queue_dir = var_dir / "celery"
    for folder in ("queue", "processed"):
        (queue_dir / folder).mkdir(parents=True, exist_ok=True)
    options = {
        "data_folder_in": str(queue_dir / "queue"),
        "data_folder_out": str(queue_dir / "queue"),
        "processed_folder": str(queue_dir / "processed"),
        "control_folder": str(queue_dir / "control"),
    }
    return Celery("fwtest-sender", broker="filesystem://", broker_transport_options=options)


@contextlib.contextmanager
def private_broker(tier: str) -> Iterator[str | None]:
    """A broker nobody else consumes from. Embedded: None (the filesystem transport lives
    in the test's own var dir). Services: a Redis database number of the test's own
    (`services.private_redis`)."""
    if tier != "services":
        yield None
        return
    with services.private_redis() as url:
        yield url
