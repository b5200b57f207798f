"""Alert-rules benchmark: `.venv/bin/python bench/rules.py [--db sqlite|postgres] [--skip-slack]`.

Over a fresh, migrated database (the built-in rule pack is installed by migration, every
rule enabled) holding the inventory and latest state of 10,000 GPUs (1,250 nodes × 8),
500 direct-liquid racks with two feeds each, 20 CDUs (25 racks each) and one site —
mostly healthy, a few hundred entities breaching warning-level rules:

  1. times `fleet.alerts.engine.evaluate(now)` in this process, several ticks 10 s apart
     (the first creates the instances; the rest are the steady state), with per-phase
     timings; profiles one more evaluation with cProfile when the steady median is over 1 s;
  2. unless --skip-slack: starts a real `celery worker` and `celery beat` (evaluation every
     FLEETWATCH_ALERT_EVAL_S), a local receiver answering like Slack as a critical-only
     route, and one critical rule with a 30 s for-duration on node inlet temperature; makes
     its condition true at T0 (a fresh value in fw_node_latest, kept fresh) and measures
     T0 → the Slack POST, over a few trials at random phases of the beat.

Prints a table and, last, one `key=value` line. Targets (the issue): eval_s ≤ 1;
condition_to_slack_s ≤ for_s + 2 × eval_interval_s.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime as dt
import hashlib
import io
import os
import platform
import pstats
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.environment import use_bench_settings  # noqa: E402

use_bench_settings()

from tests.support import services  # noqa: E402
from tests.support.processes import stop_process  # noqa: E402
from tests.support.server import FleetServer  # noqa: E402
from tests.support.slack_receiver import SlackReceiver  # noqa: E402

RACKS, LOOPS, NODES, GPUS_PER_NODE = 500, 20, 1250, 8
RACKS_PER_LOOP = RACKS // LOOPS  # 25
HALLS = ("Hall A", "Hall B", "Hall C", "Hall D")
SLUG = "bench"
RACK_BUDGET_KW = 40.0
SLOWDOWN_C, SHUTDOWN_C, GPU_MAX_C, MEM_MAX_C, POWER_MAX_W = 87.0, 92.0, 85.0, 95.0, 700.0
SW_POWER_CAP, SW_THERMAL = 0x4, 0x20  # NVML clock-event reason bits (agents/protocol/reasons)
TIMED_EVALS = 11  # the first (creates instances) and five steady ones
EVAL_SPACING_S = 10.0
FOR_S = 30
BENCH_THRESHOLD_C, BENCH_HOT_C, BENCH_COOL_C = 30.0, 31.0, 22.0
# A node-inlet value between the pack's recommended (27 °C, warning) and allowable (32 °C,
# critical) limits: only the bench rule is critical, so only it reaches the critical route.
MARKER = "BENCH-RULE"
REDIS_KEYS = ("celery", "rules", "unacked", "unacked_index", "unacked_mutex")


# ---------------------------------------------------------------------------
# database and Django


@dataclass
class BenchDb:
    kind: str
    var_dir: Path
    env: dict[str, str]
    pg_name: str | None = None
    redis_url: str | None = None
    admin_url: str | None = None  # read before this process's DATABASE_URL is the bench's


def make_database(kind: str, var_dir: Path, eval_interval: float, redis_db: int) -> BenchDb:
    """A fresh database (SQLite file, or a new PostgreSQL database with a Redis broker
    on a database index of our own) and the environment every process of the bench uses."""
    extra = {"FLEETWATCH_ALERT_EVAL_S": f"{eval_interval:g}", "LOG_LEVEL": "INFO"}
    if kind == "sqlite":
        env = FleetServer(var_dir, extra_env=extra).env()
        return BenchDb(kind, var_dir, env)
    admin = services.services_database_url()
    name = f"fwbench_{uuid.uuid4().hex[:8]}"
    url = services.create_database(admin, name)
    # Beat's routes are fixed ("rules", "celery"): a Redis index of our own keeps other
    # workers on the shared Redis (tests, the demo) from taking the bench's messages.
    redis_url = f"{services.services_redis_url().rsplit('/', 1)[0]}/{redis_db}"
    env = FleetServer(var_dir, database_url=url, redis_url=redis_url, extra_env=extra).env()
    return BenchDb(kind, var_dir, env, name, redis_url, admin)


@contextlib.contextmanager
def bench_database(
    kind: str, prefix: str, eval_interval: float = 10.0, redis_db: int = 12
) -> Iterator[BenchDb]:
    """`make_database`'s database in a temporary folder named `prefix`…: dropped (its
    Redis keys deleted) and the folder removed however we leave."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        db = make_database(kind, Path(tmp), eval_interval, redis_db)
        try:
            yield db
        finally:
            drop_database(db)


def setup_django(db: BenchDb) -> None:
    """Point this process at the bench database, then migrate from scratch."""
    for key in ("DATABASE_URL", "REDIS_URL"):
        os.environ.pop(key, None)  # env() leaves them out for SQLite; so must we
    os.environ.update(db.env)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def drop_database(db: BenchDb) -> None:
    from django.db import connections

    connections.close_all()
    try:
        if db.pg_name and db.admin_url:
            services.drop_database(db.admin_url, db.pg_name)
    finally:
        if db.redis_url:
            import redis

            client = redis.Redis.from_url(db.redis_url)
            client.delete(*REDIS_KEYS, *client.keys("_kombu.*"))


# ---------------------------------------------------------------------------
# inventory


@dataclass
class Inventory:
    site_id: int
    racks: list[int]  # rack ids, in plan order
    loops: list[int]
    feeds: list[tuple[int, int]]  # (feed id, rack id)
    nodes: list[int]  # node ids, in plan order
    node_rack: dict[int, int] = field(default_factory=dict)


def nodes_in_rack(rack_index: int) -> int:
    """2 or 3 nodes per rack: 250 × 3 + 250 × 2 = 1,250."""
    return 3 if rack_index % 2 == 0 else 2


def build_inventory() -> Inventory:
    """Site, halls, loops, racks with budgets and feeds, nodes, GPUs with their limits,
    one source token per agent: bulk inserts, ids read back in plan order."""
    from django.db import transaction

    from fleet.choices import LiquidClassChoices, RackCoolingChoices
    from fleet.models import GPU, CoolingLoop, Hall, Node, PowerFeed, Rack, Site

    with transaction.atomic():
        site = Site.objects.create(slug=SLUG, name="Bench site")
        halls = Hall.objects.bulk_create([Hall(site=site, name=n) for n in HALLS])
        loops = CoolingLoop.objects.bulk_create(
            CoolingLoop(
                site=site,
                name=f"CDU-{i + 1:02d}",
                capacity_kw=RACKS_PER_LOOP * RACK_BUDGET_KW,
                liquid_class=LiquidClassChoices.W32,
                rated_flow_lpm=600.0,
            )
            for i in range(LOOPS)
        )
        racks = Rack.objects.bulk_create(
            Rack(
                hall=halls[i * len(HALLS) // RACKS],
                name=f"R{i + 1:03d}",
                cooling=RackCoolingChoices.DIRECT_LIQUID,
                power_budget_kw=RACK_BUDGET_KW,
                loop=loops[i // RACKS_PER_LOOP],
                position=i,
            )
            for i in range(RACKS)
        )
        PowerFeed.objects.bulk_create(
            PowerFeed(rack=rack, name=name) for rack in racks for name in ("A", "B")
        )
        Node.objects.bulk_create(
            Node(name=f"bench-r{i + 1:03d}-n{n}", rack=rack, position=n, model="HGX H200")
            for i, rack in enumerate(racks)
            for n in range(1, nodes_in_rack(i) + 1)
        )
        nodes = list(Node.objects.order_by("rack__position", "position").values_list("id", "rack"))
        GPU.objects.bulk_create(
            GPU(
                node_id=node_id,
                index=g,
                model="NVIDIA H200",
                uuid=f"GPU-bench-{node_id:05d}-{g}",
                slowdown_c=SLOWDOWN_C,
                shutdown_c=SHUTDOWN_C,
                gpu_max_c=GPU_MAX_C,
                mem_max_c=MEM_MAX_C,
                power_limit_max_w=POWER_MAX_W,
            )
            for node_id, _ in nodes
            for g in range(GPUS_PER_NODE)
        )
        add_source_tokens(site)
    inv = Inventory(
        site_id=site.pk,
        racks=list(Rack.objects.order_by("position").values_list("id", flat=True)),
        loops=list(CoolingLoop.objects.order_by("name").values_list("id", flat=True)),
        feeds=list(PowerFeed.objects.order_by("rack__position", "name").values_list("id", "rack")),
        nodes=[n for n, _ in nodes],
        node_rack=dict(nodes),
    )
    assert len(inv.nodes) == NODES and len(inv.racks) == RACKS, "inventory plan is off"
    return inv


def add_source_tokens(site: Any) -> None:
    """A token per node, rack, loop and the site, so `agent_silent_intervals` has sources
    to judge (last_seen kept fresh by `refresh`)."""
    from fleet.models import CoolingLoop, Node, Rack, SourceToken

    sources = [("site", f"site:{SLUG}")]
    sources += [("node", f"node:{n}") for n in Node.objects.values_list("name", flat=True)]
    sources += [("rack", f"rack:{SLUG}/{n}") for n in Rack.objects.values_list("name", flat=True)]
    sources += [
        ("loop", f"loop:{SLUG}/{n}") for n in CoolingLoop.objects.values_list("name", flat=True)
    ]
    SourceToken.objects.bulk_create(
        SourceToken(
            source=source,
            kind=kind,
            site=site,
            token_hash=hashlib.sha256(source.encode()).hexdigest(),
            last_seen=time.time(),
        )
        for kind, source in sources
    )


def add_old_events(inv: Inventory, now: float) -> None:
    """A day of benign XIDs (13, 31, 43: application faults, in neither XID rule's codes),
    so the events rules' grouped counts run over a table that is not empty."""
    from fleet.models import Event

    rng = random.Random(7)
    Event.objects.bulk_create(
        Event(
            source=f"node:{node_id}",
            seq=i,
            pos=0,
            ts=now - rng.uniform(0, 86_400),
            node_id=node_id,
            gpu_index=rng.randrange(GPUS_PER_NODE),
            kind="xid",
            code=rng.choice((13, 31, 43)),
        )
        for i, node_id in enumerate(rng.choices(inv.nodes, k=5000))
    )


# ---------------------------------------------------------------------------
# latest state


def gpu_sample(node_i: int, g: int) -> dict[str, Any]:
    """A busy, healthy H200; every 50th GPU runs hot (headroom 8 °C: warning), and 50
    GPUs each have HBM near its limit, the SW-thermal bit, or power-capped low clocks."""
    n = node_i * GPUS_PER_NODE + g
    s: dict[str, Any] = {
        "util_gpu_pct": 97.0,
        "util_mem_pct": 40.0,
        "mem_used_mib": 120_000.0,
        "mem_total_mib": 143_771.0,
        "temp_gpu_c": 55.0 + n % 20,
        "temp_mem_c": 70.0,
        "power_w": 650.0,
        "power_instant_w": 662.0,
        "power_limit_w": POWER_MAX_W,
        "clock_sm_mhz": 1980.0,
        "clock_mem_mhz": 2619.0,
        "pstate": 0,
        "clock_event_reasons": SW_POWER_CAP,  # normal under load
        "remap_pending": 0,
        "remap_failure": 0,
        "nvlink_up": 18,
        "fan_pct": 0.0,
        "pcie_tx_kib_s": 100.0,
        "pcie_rx_kib_s": 100.0,
    }
    if gpu_hot(n):
        s["temp_gpu_c"] = 79.0
    if n % 200 == HBM_HOT:
        s["temp_mem_c"] = 91.0
    if n % 200 == SW_THERMAL_SET:
        s["clock_event_reasons"] = SW_POWER_CAP | SW_THERMAL
    if n % 200 == CLOCKS_CAPPED:
        s["clock_sm_mhz"] = 1300.0
    return s


# Who breaches (warning rules only): the GPU, node, rack and loop predicates the samples
# follow, also used to find a node whose rack and loop have no alert at all.
HBM_HOT, SW_THERMAL_SET, CLOCKS_CAPPED = 7, 13, 19
PUMP_FAILED_LOOP, DELTA_COLLAPSED_LOOP = 7, 13


def gpu_hot(n: int) -> bool:
    return n % 50 == 0


def gpu_breaches(n: int) -> bool:
    return gpu_hot(n) or n % 200 in (HBM_HOT, SW_THERMAL_SET, CLOCKS_CAPPED)


def node_hot(node_i: int) -> bool:
    return node_i % 31 == 0


def rack_power_high(rack_i: int) -> bool:
    return rack_i % 25 == 0


def rack_hot(rack_i: int) -> bool:
    return rack_i % 25 == 12


def rack_node_indices() -> list[range]:
    """Per rack, in plan order, the indices of its nodes in `Inventory.nodes`."""
    out, start = [], 0
    for r in range(RACKS):
        out.append(range(start, start + nodes_in_rack(r)))
        start += nodes_in_rack(r)
    return out


def quiet_node(inv: Inventory) -> int:
    """A node in a rack, on a loop, where nothing else alerts: its alert is a group of its
    own (fleet/alerts/grouping.py), so its first message is not held back as an update of
    a group already announced."""
    for r, nodes in enumerate(rack_node_indices()):
        loop_i = r // RACKS_PER_LOOP
        noisy = rack_power_high(r) or rack_hot(r)
        noisy = noisy or loop_i in (PUMP_FAILED_LOOP, DELTA_COLLAPSED_LOOP)
        noisy = noisy or any(
            node_hot(i) or any(gpu_breaches(i * GPUS_PER_NODE + g) for g in range(GPUS_PER_NODE))
            for i in nodes
        )
        if not noisy:
            return inv.nodes[nodes[0]]
    raise RuntimeError("no quiet rack in the plan")


def node_sample(node_i: int) -> dict[str, Any]:
    """Inlet 22–26 °C; every 31st node at 28.5 °C (recommended limit: warning)."""
    inlet = 28.5 if node_hot(node_i) else 22.0 + node_i % 5
    return {
        "cpu_pct": 35.0,
        "load1": 24.0,
        "mem_used_mib": 900_000.0,
        "mem_total_mib": 2_000_000.0,
        "temp_cpu_c": 55.0,
        "temp_inlet_c": inlet,
        "temp_outlet_c": inlet + 12.0,
        "power_w": 6_500.0,
        "disk_read_bytes_s": 1e6,
        "disk_write_bytes_s": 2e6,
        "net_rx_bytes_s": 1e9,
        "net_tx_bytes_s": 1e9,
    }


def rack_power_w(rack_i: int) -> float:
    """Its nodes' 6.5 kW each; every 25th rack at 92.5 % of budget (warning)."""
    if rack_power_high(rack_i):
        return 0.925 * RACK_BUDGET_KW * 1000
    return nodes_in_rack(rack_i) * 6_500.0 + 800.0


def rack_sample(rack_i: int) -> dict[str, Any]:
    inlet = 28.0 if rack_hot(rack_i) else 23.0  # 20 racks over the recommended 27 °C
    return {
        "power_w": rack_power_w(rack_i),
        "temp_inlet_c": inlet,
        "temp_outlet_c": inlet + 14.0,
        "humidity_pct": 45.0,
        "liquid_supply_c": 28.0,
        "liquid_return_c": 38.0,
        "liquid_flow_lpm": 20.0,
        "liquid_dp_kpa": 80.0,
        "leak": 0,
    }


def loop_sample(loop_i: int) -> dict[str, Any]:
    """A W32 loop at 28 °C supply, 83 % of rated flow; one has a failed pump and one a
    collapsed ΔT (warnings)."""
    return {
        "supply_c": 28.0,
        "return_c": 28.8 if loop_i == DELTA_COLLAPSED_LOOP else 38.0,
        "delta_c": 0.8 if loop_i == DELTA_COLLAPSED_LOOP else 10.0,
        "flow_lpm": 500.0,
        "supply_kpa": 300.0,
        "return_kpa": 200.0,
        "dp_kpa": 100.0,
        "heat_removed_kw": 700.0,
        "primary_supply_c": 20.0,
        "primary_return_c": 30.0,
        "primary_flow_lpm": 700.0,
        "pump_speed_pct": 60.0,
        "pumps_running": 2,
        "pumps_failed": 1 if loop_i == PUMP_FAILED_LOOP else 0,
        "leak": 0,
        "reservoir_low": 0,
    }


def fill_latest(inv: Inventory, at: float) -> int:
    """Every entity's latest state through the one write path (`merge_latest`, bulk
    upserts), as the ingest child writes it; returns the rows written."""
    from django.conf import settings

    from fleet.storage.db import open_db
    from fleet.storage.latest import LatestDelta, merge_latest

    delta = LatestDelta()
    for i, node_id in enumerate(inv.nodes):
        delta.add("node", (node_id,), {"ts": at, **node_sample(i)}, at)
        for g in range(GPUS_PER_NODE):
            delta.add("gpu", (node_id, g), {"ts": at, "gpu": g, **gpu_sample(i, g)}, at)
    for i, rack_id in enumerate(inv.racks):
        delta.add("rack", (rack_id,), {"ts": at, **rack_sample(i)}, at)
    power = {rack_id: rack_power_w(i) for i, rack_id in enumerate(inv.racks)}
    for feed_id, rack_id in inv.feeds:
        half = power[rack_id] / 2  # two primary feeds share the rack
        sample = {"ts": at, "power_w": half, "voltage_v": 415.0, "current_a": half / 415 / 1.732}
        delta.add("feed", (feed_id,), sample, at)
    for i, loop_id in enumerate(inv.loops):
        delta.add("loop", (loop_id,), {"ts": at, **loop_sample(i)}, at)
    it_w = NODES * 6_500.0
    facility = {"ts": at, "total_power_w": it_w * 1.35, "it_power_w": it_w, "pue_category": 1}
    delta.add("facility", (inv.site_id,), {**facility, "outdoor_c": 15.0}, at)
    rows = len(delta)
    db = open_db(dict(settings.DATABASES["default"]))
    try:
        db.transaction(lambda tx: merge_latest(tx, delta))
    finally:
        db.close()
    return rows


def refresh_statements() -> list[tuple[str, int]]:
    """Per latest table: an UPDATE moving `ts` and every field's sample time to one
    parameter (values unchanged; a time beside a NULL value is never read), and how
    many parameters it takes."""
    from fleet.storage.latest import metric_names
    from fleet.storage.schema import ENTITY_COLUMNS, field_ts_column, latest_table

    out = []
    for kind in ENTITY_COLUMNS:
        cols = ["ts", *(field_ts_column(n) for n in metric_names(kind))]
        sets = ", ".join(f"{c} = %s" for c in cols)
        out.append((f"UPDATE {latest_table(kind)} SET {sets}", len(cols)))
    return out


def refresh(at: float, latest: bool = True) -> None:
    """Make the latest state (and every agent's last batch) fresh as of `at`, as a live
    fleet keeps it: the values stay, their sample times move."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cur:
        if latest:
            for sql, n in refresh_statements():
                cur.execute(sql, [at] * n)
        cur.execute("UPDATE fleet_sourcetoken SET last_seen = %s", [at])


# ---------------------------------------------------------------------------
# timed evaluations


class PhaseTimer:
    """Exclusive wall time per phase of `evaluate`, by wrapping the engine's module-level
    helpers (looked up at call time) for the length of the bench: a nested phase's time
    is not counted twice."""

    def __init__(self) -> None:
        self.spent: defaultdict[str, float] = defaultdict(float)
        self._stack: list[float] = []  # per open phase: its children's time so far
        self._originals: list[tuple[Any, str, Any]] = []

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._stack.append(0.0)
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                took = time.perf_counter() - started
                children = self._stack.pop()
                self.spent[name] += took - children
                if self._stack:
                    self._stack[-1] += took

        return timed

    def install(self) -> None:
        """Wrap whichever of the engine's helpers exist (the engine is being worked on:
        a helper that is gone is simply not timed on its own)."""
        from fleet.alerts import engine, evaluate_state

        self._patch(evaluate_state.Snapshot, "readings", "read latest state")
        for module, attr, name in (
            (evaluate_state, "gpu_limits", "read GPU limits"),
            (engine, "values_for", "compute signal values"),
            (engine, "assign_groups", "assign groups"),
            (engine, "_write", "write instances + history"),
            (engine, "notify_groups", "notify groups (claims, deliveries)"),
        ):
            if callable(getattr(module, attr, None)):
                self._patch(module, attr, name)

    def _patch(self, owner: Any, attr: str, name: str) -> None:
        original = getattr(owner, attr)
        self._originals.append((owner, attr, original))
        setattr(owner, attr, self.wrap(name, original))

    def uninstall(self) -> None:
        for owner, attr, original in self._originals:
            setattr(owner, attr, original)
        self._originals.clear()

    def take(self) -> dict[str, float]:
        spent, self.spent = dict(self.spent), defaultdict(float)
        return spent


@dataclass
class EvalRun:
    at: float
    seconds: float
    result: dict[str, int]
    phases: dict[str, float]


def timed_evaluations(timer: PhaseTimer, base: float) -> list[EvalRun]:
    """Evaluations at base, base + 10 s, …, each after the latest state is refreshed to
    its time (untimed): the first creates the instances, the rest find them unchanged."""
    from fleet.alerts.engine import evaluate

    runs = []
    for i in range(TIMED_EVALS):
        at = base + i * EVAL_SPACING_S
        refresh(at - 1.0)
        timer.take()
        started = time.perf_counter()
        result = evaluate(at)
        seconds = time.perf_counter() - started
        runs.append(EvalRun(at, seconds, result, timer.take()))
    return runs


def profile_evaluation(at: float, top: int = 15) -> str:
    """One more steady evaluation under cProfile: the hotspots by own time, then by
    cumulative time (file:line(function))."""
    from fleet.alerts.engine import evaluate

    refresh(at - 1.0)
    prof = cProfile.Profile()
    prof.runcall(evaluate, at)
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    # paths relative to the repository (and to site-packages), so file:line reads short
    site = str(Path(cProfile.__file__).parent)
    text = out.getvalue().replace(f"{ROOT}/", "").replace(f"{site}/", "")
    return re.sub(r"\S*/site-packages/", "", text)


def instance_counts() -> list[tuple[str, str, int]]:
    from django.db.models import Count

    from fleet.alerts.models import AlertInstance

    rows = AlertInstance.objects.values_list("rule__key", "state").annotate(n=Count("id"))
    return sorted(rows.order_by())


# ---------------------------------------------------------------------------
# condition → Slack, with a real worker and beat


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


# ---------------------------------------------------------------------------
# report


def print_report(
    args: argparse.Namespace, rows: int, runs: list[EvalRun], counts: list[tuple[str, str, int]]
) -> None:
    print(
        f"machine: {platform.machine()} {platform.platform(terse=True)}, {os.cpu_count()} CPUs,"
        f" Python {platform.python_version()}"
    )
    print(
        f"store: {args.db}; {NODES * GPUS_PER_NODE} GPUs, {NODES} nodes, {RACKS} racks"
        f" ({2 * RACKS} feeds), {LOOPS} CDUs, 1 site; {rows} latest-state rows"
    )
    print(f"rules evaluated: {runs[0].result.get('rules')} (the built-in pack, all enabled)")
    for run in runs:
        extra = ", ".join(f"{k}={v}" for k, v in run.result.items() if k != "rules")
        print(f"  eval at +{run.at - runs[0].at:4.0f} s  {run.seconds:7.3f} s   {extra}")
    total = Counter({state: 0 for state in ("pending", "firing", "resolved")})
    for _, state, n in counts:
        total[state] += n
    print(f"instances after the timed evaluations: {dict(total)}")
    for key, state, n in counts:
        print(f"  {key:28s} {state:9s} {n:5d}")
    names = sorted({k for run in runs for k in run.phases})
    print(f"phases (s, exclusive){' ' * 21}first   steady median of {len(runs) - 1}")
    for name in names:
        first = runs[0].phases.get(name, 0.0)
        steady = statistics.median(run.phases.get(name, 0.0) for run in runs[1:])
        print(f"  {name:38s} {first:7.3f}  {steady:7.3f}")
    rest_first = runs[0].seconds - sum(runs[0].phases.values())
    rest = statistics.median(r.seconds - sum(r.phases.values()) for r in runs[1:])
    print(f"  {'rest (claim, load, steps)':38s} {rest_first:7.3f}  {rest:7.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--skip-slack", action="store_true", help="only time the evaluation")
    parser.add_argument("--eval-interval", type=float, default=10.0, help="FLEETWATCH_ALERT_EVAL_S")
    parser.add_argument("--trials", type=int, default=3, help="condition → Slack measurements")
    parser.add_argument("--profile", action="store_true", help="cProfile even if eval_s ≤ 1")
    parser.add_argument("--redis-db", type=int, default=11, help="Redis index (postgres only)")
    parser.add_argument("--keep-logs", type=Path, help="copy the worker and beat logs here")
    args = parser.parse_args()
    with bench_database(args.db, "fw-bench-rules-", args.eval_interval, args.redis_db) as db:
        try:
            return run(args, db)
        finally:
            if args.keep_logs:
                args.keep_logs.mkdir(parents=True, exist_ok=True)
                for log in db.var_dir.glob("*.log"):
                    shutil.copy(log, args.keep_logs / f"{args.db}-{log.name}")


def run(args: argparse.Namespace, db: BenchDb) -> int:
    setup_django(db)
    inv = build_inventory()
    # timed ticks ten minutes back: the worker's real-time ticks come after them
    base = time.time() - 600
    add_old_events(inv, base)
    rows = fill_latest(inv, base - 1.0)
    timer = PhaseTimer()
    timer.install()
    runs = timed_evaluations(timer, base)
    eval_s = statistics.median(r.seconds for r in runs[1:])
    timer.uninstall()  # the profile and the worker see the engine as it is
    print_report(args, rows, runs, instance_counts())
    if eval_s > 1.0 or args.profile:
        print(f"profile of one steady evaluation (eval_s={eval_s:.3f} s):")
        print(profile_evaluation(base + TIMED_EVALS * EVAL_SPACING_S))
    slack_s = "skipped"
    if not args.skip_slack:
        result = condition_to_slack(db, inv, args.eval_interval, args.trials)
        target = FOR_S + 2 * args.eval_interval
        print(
            "condition → Slack (worker + beat, the pack kept enabled and its data kept fresh;"
            " route: critical only, so only the bench rule posts):"
        )
        for i, s in enumerate(result.trials, 1):
            print(f"  trial {i}: {s:6.2f} s  (target ≤ {target:g} s)")
        ticks = result.worker_eval_s
        if ticks:
            print(
                f"  worker alerts.evaluate during trials: median {statistics.median(ticks):.3f} s,"
                f" max {max(ticks):.3f} s over {len(ticks)} ticks"
            )
        print(f"  other POSTs to the receiver: {result.other_posts}")
        slack_s = f"{max(result.trials):.2f}"  # the worst trial: the target is a bound
    print(
        f"gpus={NODES * GPUS_PER_NODE} eval_s={eval_s:.3f} condition_to_slack_s={slack_s}"
        f" for_s={FOR_S} eval_interval_s={args.eval_interval:g}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
