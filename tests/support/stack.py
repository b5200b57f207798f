"""The whole product as processes, for end-to-end scenarios: a real backend
(`FleetServer`, uvicorn) over the tier's fresh database, a real Celery worker
(every queue of fleetwatch/celery.py, not eager) and beat, and the fleet simulator sending to the
backend through the real agent code, with faults (`--fault`, docs/simulator.md).

    with Stack.started(tmp_path, tier, racks=SMALL_SITE, slack_url=url,
                       faults=["cdu-pump-fail:CDU-1@15s+2m"]) as stack:
        stack.wait_for_agents()
        stack.sim_started_at              # wall time of the simulator's first tick
        stack.alert_instances()           # AlertInstance rows, with their rule keys
        stack.logs()                      # the tail of every process's log, for failures

The site is seeded from `fleet.demo.RackPlan`s of our choosing (a few nodes per rack
keeps the CPU low), a Slack route points at the test's receiver, and the alert
evaluation runs every `eval_s` seconds (FLEETWATCH_ALERT_EVAL_S). In the services tier
the stack gets a Redis database number of its own, so its worker consumes only its own
queues, and flushes it afterwards. One worker takes every queue (fewer processes on a small
test machine): the split between workers is tested in tests/fleet/test_queues.py.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from fleetwatch.celery import QUEUES
from tests.support.celery_proc import private_broker
from tests.support.server import ROOT, FleetServer


@dataclass(frozen=True)
class RackSpec:
    """One rack of the seeded site (fields as `fleet.demo.RackPlan`)."""

    name: str
    cooling: str  # "direct_liquid", "immersion", "air", "rear_door"
    nodes: int
    loop: str | None
    hall: str = "Hall A"
    budget_kw: float = 130.0
    feed_amps: int = 125
    gpu_model: str = "NVIDIA H200"


@dataclass(frozen=True)
class Instance:
    """An AlertInstance row (fleet/alerts/models.py), times as epoch seconds."""

    rule: str
    scope: str
    entity: str
    state: str
    started_at: float | None
    fired_at: float | None
    resolved_at: float | None
    where: dict[str, str]  # names: loop, rack, node, gpu (what the entity is)

    @property
    def rack(self) -> str | None:
        return self.where.get("rack")

    def describe(self, origin: float) -> str:
        def rel(t: float | None) -> str:
            return "—" if t is None else f"{t - origin:+7.1f}s"

        where = " ".join(f"{k}={v}" for k, v in self.where.items())
        return (
            f"{self.rule:28} {self.entity:10} {self.state:8} started {rel(self.started_at)}"
            f" fired {rel(self.fired_at)} resolved {rel(self.resolved_at)}  {where}"
        )


def _epoch(value: Any) -> float | None:
    """A timestamp column as epoch seconds (PostgreSQL: datetime; SQLite: text)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    text = str(value).replace(" ", "T")
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:  # Django stores UTC in SQLite
        from datetime import UTC

        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


class SiteServer(FleetServer):
    """A FleetServer whose site is made of the given racks, with a Slack route."""

    def __init__(
        self,
        var_dir: Path,
        *,
        rack_specs: tuple[RackSpec, ...],
        slack_url: str | None = None,
        slack_min_severity: str = "warning",
        gpus_per_node: int = 8,
        **kwargs: Any,
    ) -> None:
        super().__init__(var_dir, **kwargs)
        self.rack_specs = rack_specs
        self.slack_url = slack_url
        self.slack_min_severity = slack_min_severity
        self.gpus_per_node = gpus_per_node

    def prepare(self) -> None:
        self.migrate()
        plans = [
            [r.hall, r.name, r.cooling, r.budget_kw, r.nodes, r.loop, r.feed_amps, r.gpu_model]
            for r in self.rack_specs
        ]
        script = (
            "import json\n"
            "from fleet.demo import RackPlan, ensure_enrollment_token, seed_demo_site\n"
            "from fleet.notifications.models import Route\n"
            f"args = json.loads({json.dumps(json.dumps(self._seed_args(plans)))})\n"
            "plans = tuple(RackPlan(*p) for p in args['plans'])\n"
            "site = seed_demo_site('demo', plans, args['gpus'])\n"
            "ensure_enrollment_token(site, args['token'])\n"
            "if args['slack']:\n"
            "    Route.objects.update_or_create(name='test-slack', defaults={\n"
            "        'webhook_url': args['slack'], 'min_severity': args['severity']})\n"
        )
        self.manage("shell", "-v", "0", "-c", script)

    def _seed_args(self, plans: list[list[Any]]) -> dict[str, Any]:
        return {
            "plans": plans,
            "gpus": self.gpus_per_node,
            "token": self.enroll_token,
            "slack": self.slack_url,
            "severity": self.slack_min_severity,
        }


class Stack:
    def __init__(
        self,
        server: SiteServer,
        *,
        faults: list[str],
        eval_s: float,
        facility_interval_s: float,
        sim_args: list[str],
    ) -> None:
        self.server = server
        self.faults = faults
        self.eval_s = eval_s
        self.facility_interval_s = facility_interval_s
        self.sim_args = sim_args
        self.var_dir = server.var_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.node = f"fwstack-{uuid.uuid4().hex[:8]}"
        self.worker_argv: list[str] = []
        # (wall time, exit code, log tail) of each worker exit; check_alive restarts it
        self.worker_crashes: list[tuple[float, int, str]] = []

    # -- processes --------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str]) -> None:
        log = (self.var_dir / f"{name}.log").open("ab")
        env = self.server.env()
        env["FLEETWATCH_ALERT_EVAL_S"] = str(self.eval_s)
        self.procs[name] = subprocess.Popen(
            argv, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()

    def start_celery(self) -> None:
        celery = [sys.executable, "-m", "celery", "-A", "fleetwatch"]
        self.worker_argv = [
            *celery,
            *("worker", "--pool", "solo", "-Q", ",".join(QUEUES), "-n", f"{self.node}@%h"),
            *("-l", "info", "--without-mingle", "--without-gossip", "--without-heartbeat"),
        ]
        self._spawn("worker", self.worker_argv)
        schedule = self.var_dir / "celerybeat-schedule"
        self._spawn("beat", [*celery, "beat", "-l", "info", "--schedule", str(schedule)])

    def start_simulator(self) -> None:
        argv = [
            *(sys.executable, "-m", "agents.cli", "--log-level", "info", "simulate"),
            *("--server", self.server.url, "--enroll-token", self.server.enroll_token),
            *("--spool-dir", str(self.var_dir / "sim-spool")),
            *("--facility-interval", str(self.facility_interval_s)),
            *self.sim_args,
        ]
        for fault in self.faults:
            argv += ["--fault", fault]
        self._spawn("simulator", argv)

    def check_alive(self) -> None:
        """Raise if a process died; except the worker, which is restarted as a supervisor
        (systemd) would, its exit recorded in `worker_crashes`: the embedded tier's worker
        dies when kombu's filesystem transport reads a message file that its writer has
        created but not yet written (JSONDecodeError in `_get`, kombu 5.x)."""
        worker = self.procs.get("worker")
        if worker is not None and worker.poll() is not None:
            self.worker_crashes.append((time.time(), worker.returncode, self.log_tail("worker")))
            self._spawn("worker", self.worker_argv)
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise AssertionError(
                    f"{name} exited with code {proc.returncode}:\n{self.log_tail(name)}"
                )
        if self.server.proc is None or self.server.proc.poll() is not None:
            raise AssertionError(f"the server exited:\n{self.log_tail('server')}")

    def stop(self) -> None:
        # The simulator first (it flushes to the server), then beat, then the worker.
        for name in ("simulator", "beat", "worker"):
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    # -- what happened ----------------------------------------------------------------
    def sim_first_tick(self) -> float | None:
        """Wall time of the simulator's first node sample as stored (its elapsed 0)."""
        rows = self.server.query("SELECT min(ts) FROM fw_node_raw")
        return float(rows[0][0]) if rows and rows[0][0] is not None else None

    def wait_for_agents(self, nodes: int, timeout: float = 60) -> float:
        """Until every node has sent a sample; returns the first tick's wall time."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            seen = self.server.query("SELECT count(DISTINCT node_id) FROM fw_node_raw")[0][0]
            if int(seen or 0) >= nodes:
                first = self.sim_first_tick()
                assert first is not None
                return first
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{seen} of {nodes} nodes sent samples in {timeout} s\n{self.logs()}"
                )
            time.sleep(0.5)

    def _names(self) -> dict[str, dict[str, dict[str, str]]]:
        """Entity keys (as in AlertInstance.entity) → names, per scope."""
        q = self.server.query
        racks = {str(i): n for i, n in q("SELECT id, name FROM fleet_rack")}
        loops = {str(i): n for i, n in q("SELECT id, name FROM fleet_coolingloop")}
        rack_loop = {
            str(r): loops.get(str(lp), "")
            for r, lp in q("SELECT id, loop_id FROM fleet_rack")
            if lp is not None
        }
        nodes = {
            str(i): {"rack": racks.get(str(r), "?"), "node": n}
            for i, n, r in q("SELECT id, name, rack_id FROM fleet_node")
        }
        for node in nodes.values():
            rack_id = next((k for k, v in racks.items() if v == node["rack"]), "")
            if rack_loop.get(rack_id):
                node["loop"] = rack_loop[rack_id]
        return {
            "node": nodes,
            "rack": {
                i: {"rack": n, **({"loop": rack_loop[i]} if rack_loop.get(i) else {})}
                for i, n in racks.items()
            },
            "loop": {i: {"loop": n} for i, n in loops.items()},
        }

    def alert_instances(self) -> list[Instance]:
        rows = self.server.query(
            "SELECT r.key, i.scope, i.entity, i.state, i.started_at, i.fired_at,"
            " i.resolved_at FROM alerts_alertinstance i"
            " JOIN alerts_alertrule r ON r.id = i.rule_id ORDER BY i.started_at, r.key, i.entity"
        )
        names = self._names()
        out = []
        for key, scope, entity, state, started, fired, resolved in rows:
            entity = str(entity)
            if scope == "gpu":
                node, _, gpu = entity.partition(":")
                where = {**names["node"].get(node, {}), "gpu": gpu}
            else:
                where = dict(names.get(str(scope), {}).get(entity, {}))
            out.append(
                Instance(
                    str(key),
                    str(scope),
                    entity,
                    str(state),
                    _epoch(started),
                    _epoch(fired),
                    _epoch(resolved),
                    where,
                )
            )
        return out

    def deliveries_in_flight(self) -> int:
        """Slack deliveries queued or being sent (fleet.notifications.Delivery)."""
        rows = self.server.query(
            "SELECT count(*) FROM notifications_delivery WHERE state IN ('pending', 'sending')"
        )
        return int(rows[0][0])

    def rule_for_s(self, key: str) -> float:
        """A rule's for-duration in seconds (as stored: PostgreSQL interval, SQLite µs)."""
        value = self.server.query(
            "SELECT for_duration FROM alerts_alertrule WHERE key = ?", (key,)
        )[0][0]
        if hasattr(value, "total_seconds"):
            return float(value.total_seconds())
        return float(value) / 1e6

    def log_tail(self, name: str, chars: int = 3000) -> str:
        path = self.server.log_path if name == "server" else self.var_dir / f"{name}.log"
        try:
            return path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def logs(self, chars: int = 2000) -> str:
        names = ("server", *self.procs)
        return "\n".join(f"--- {n} log (tail) ---\n{self.log_tail(n, chars)}" for n in names)

    # -- lifecycle --------------------------------------------------------------------
    @classmethod
    @contextlib.contextmanager
    def started(
        cls,
        var_dir: Path,
        tier: str,
        *,
        racks: tuple[RackSpec, ...],
        faults: list[str],
        slack_url: str | None = None,
        slack_min_severity: str = "warning",
        eval_s: float = 2.0,
        facility_interval_s: float = 1.0,
        sim_args: list[str] | None = None,
    ) -> Iterator[Stack]:
        with (
            private_broker(tier) as redis_url,
            SiteServer.started(
                var_dir,
                tier=tier,
                redis_url=redis_url,
                rack_specs=racks,
                slack_url=slack_url,
                slack_min_severity=slack_min_severity,
                extra_env={"FLEETWATCH_ALERT_EVAL_S": str(eval_s)},
            ) as server,
        ):
            assert isinstance(server, SiteServer)
            stack = cls(
                server,
                faults=faults,
                eval_s=eval_s,
                facility_interval_s=facility_interval_s,
                sim_args=sim_args or [],
            )
            try:
                stack.start_celery()
                stack.start_simulator()
                yield stack
            finally:
                stack.stop()
