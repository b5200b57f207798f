"""The condition → Slack half of bench/rules.py: a real `celery worker` and `celery beat` on
the bench database, a local receiver answering like Slack as a critical-only route, and
one critical bench rule whose condition is made true at T0; measures T0 → the Slack POST."""

from __future__ import annotations

import contextlib
import datetime as dt
import random
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.rules_database import BenchDb
from bench.rules_inventory import Inventory
from bench.rules_latest import quiet_node, refresh
from tests.support.processes import stop_process
from tests.support.slack_receiver import SlackReceiver

ROOT = Path(__file__).resolve().parent.parent
FOR_S = 30
BENCH_THRESHOLD_C, BENCH_HOT_C, BENCH_COOL_C = 30.0, 31.0, 22.0
# A node-inlet value between the pack's recommended (27 °C, warning) and allowable (32 °C,
# critical) limits: only the bench rule is critical, so only it reaches the critical route.
MARKER = "BENCH-RULE"


@contextlib.contextmanager
def celery_process(db: BenchDb, name: str, args: list[str]) -> Iterator[Path]:
    """`celery -A fleetwatch <args>` on the bench database; stopped however we leave."""
    log = db.var_dir / f"{name}.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "fleetwatch", *args],
            env=db.env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield log
    finally:
        stop_process(proc, 20)


class Refresher(threading.Thread):
    """Keeps the fleet live while the worker evaluates: every agent's last batch each
    second (`agent_silent_intervals` fires at 3 missed 1 s intervals) and every sample
    time every 5 s (a value is stale after 30 s)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        from django.db import connection

        tick = 0
        try:
            while not self.halt.wait(1.0 if tick else 0.0):
                refresh(time.time(), latest=tick % 5 == 0)
                tick += 1
        except BaseException as exc:  # reported by the main thread
            self.error = exc
        finally:
            connection.close()

    def stop(self) -> None:
        self.halt.set()
        self.join(30)
        if self.error is not None:
            raise RuntimeError("the refresher failed") from self.error


def set_inlet(node_id: int, value: float, at: float) -> None:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "UPDATE fw_node_latest SET temp_inlet_c = %s, temp_inlet_c_ts = %s, ts = %s"
            " WHERE node_id = %s",
            [value, at, at, node_id],
        )


def worker_ticks(log: Path) -> list[float]:
    """The worker's `alerts.evaluate` durations so far (its task log lines)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    return [float(s) for s in re.findall(r"task alerts\.evaluate done in ([0-9.]+) s", text)]


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


def wait_until(what: str, check: Callable[[], bool], timeout: float, logs: list[Path]) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {p.name}\n{tail(p)}" for p in logs)
            raise RuntimeError(f"{what}: not within {timeout:.0f} s\n{tails}")
        time.sleep(0.05)


@dataclass
class SlackResult:
    trials: list[float]
    worker_eval_s: list[float]
    other_posts: int


def add_bench_rule_and_route(url: str) -> None:
    from fleet.alerts.models import AlertRule
    from fleet.notifications.models import Route

    Route.objects.create(name="bench-critical", webhook_url=url, min_severity="critical")
    AlertRule.objects.create(
        key="bench-inlet-hot",
        name="Bench inlet hot",
        scope="node",
        signal="temp_inlet_c",
        comparison="gt",
        threshold=BENCH_THRESHOLD_C,
        clear_threshold=BENCH_COOL_C + 1,
        for_duration=dt.timedelta(seconds=FOR_S),
        severity="critical",
        summary=MARKER + " {node} inlet {value:.1f} °C",
    )


def bench_instance_active() -> bool:
    from fleet.alerts.models import AlertInstance

    rows = AlertInstance.objects.filter(
        rule__key="bench-inlet-hot", state__in=("pending", "firing")
    )
    return rows.exists()


def condition_to_slack(db: BenchDb, inv: Inventory, interval: float, trials: int) -> SlackResult:
    """T0 (the bench node's inlet written hot and kept fresh) → the receiver's POST of
    the bench rule's firing message, per trial; between trials the inlet is cooled and
    the instance left to resolve, then T0 lands at a random phase of the beat."""
    node_id = quiet_node(inv)  # healthy until a trial heats its inlet
    path = "/bench-critical"
    worker_args = ["worker", "--pool", "solo", "-n", f"bench-{uuid.uuid4().hex[:6]}@%h"]
    worker_args += ["-l", "info", "--without-mingle", "--without-gossip", "--without-heartbeat"]
    beat_args = ["beat", "-l", "info", "-s", str(db.var_dir / "celerybeat-schedule")]
    with SlackReceiver() as slack:
        add_bench_rule_and_route(slack.url(path))
        refresher = Refresher()
        refresher.start()
        try:
            with (
                celery_process(db, "worker", worker_args) as wlog,
                celery_process(db, "beat", beat_args) as blog,
            ):
                logs = [wlog, blog]
                # two ticks first: the pack's pending instances (from the timed
                # evaluations' past ticks) fire on the first, so trials see the steady state
                wait_until("two worker ticks", lambda: len(worker_ticks(wlog)) >= 2, 120, logs)
                before = len(worker_ticks(wlog))
                results = [one_trial(slack, path, node_id, interval, logs) for _ in range(trials)]
                steady = worker_ticks(wlog)[before:]
        finally:
            refresher.stop()
        firing = [r for r in slack.received(path) if MARKER in r.body.get("text", "")]
        others = len(slack.received()) - len(firing)
    return SlackResult(results, steady, others)


def one_trial(
    slack: SlackReceiver, path: str, node_id: int, interval: float, logs: list[Path]
) -> float:
    time.sleep(random.uniform(0, interval))  # a random phase of the beat
    seen = len(slack.received(path))
    t0 = time.time()
    set_inlet(node_id, BENCH_HOT_C, t0)  # fresh from here on: the refresher moves its time

    # Only the bench rule is critical, so the route's first POST after T0 is its firing.
    wait_until(
        "the bench rule's Slack POST",
        lambda: len(slack.received(path)) > seen,
        FOR_S + 6 * interval + 30,
        logs,
    )
    post = slack.received(path)[seen]
    set_inlet(node_id, BENCH_COOL_C, time.time())
    wait_until("the bench instance to resolve", lambda: not bench_instance_active(), 120, logs)
    return post.at - t0
