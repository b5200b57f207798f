"""The fleet overview at 10,000 GPUs (issue 9): `.venv/bin/python bench/fleet_page.py
[--db sqlite|postgres] [--gpus N] [--requests N] [--profile]`.

bench/rules.py's inventory and latest state (500 racks, 1,250 nodes × 8 GPUs, every entity
fresh, 433 of them breaching a warning), as bench/freshness_page.py builds it. Then:

1. the rack payloads of every rack through `fleet.read.state.rack_states` (every GPU's reading,
   judged in Python) and through `fleet.read.state.rack_summaries` (GPUs folded per node in the
   database, `fleet.read.summaries_sql`) must be equal; each path timed (wall and CPU, median
   of N after a warm-up, the latest state refreshed before each);
2. GET / in this process through Django's test client with a logged-in user: median and
   p95 server time over N requests after two warm-ups, and its CPU;
3. with --profile, a cProfile of one GET /.

Last line: `fleet_page_ms=X p95_ms=X cpu_ms=X rack_states_ms=X rack_summaries_ms=X`.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import platform
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.environment import use_bench_settings  # noqa: E402

use_bench_settings()

from bench.freshness_page import PASSWORD, USER, large_inventory  # noqa: E402


def timed(fn: Callable[[], Any], runs: int, before: Callable[[], None]) -> tuple[float, float]:
    """Median wall and CPU milliseconds of `fn` over `runs` calls (after one warm-up)."""
    fn()
    walls, cpus = [], []
    for _ in range(runs):
        before()
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append((time.perf_counter() - wall) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
    return statistics.median(walls), statistics.median(cpus)


def lean_gpu_totals(now: float) -> dict[int, Any]:
    """The other way measured (not taken): `health.gpu_totals` in Python with a lean loop,
    reading only the GPU columns it judges and the limits, every rule inlined."""
    from fleet import health
    from fleet.health import thresholds as th
    from fleet.read.state import select_rows

    stale = health.STALE_AFTER_S
    rank = {lvl.rank: lvl for lvl in health.Level}
    # The limits in force: entered, else reported (fleet/health/limits.py).
    limits = {
        (n, i): (slow, mem, tlim)
        for n, i, slow, mem, tlim in select_rows(
            'SELECT node_id, "index", COALESCE(slowdown_c, reported_slowdown_c),'
            " COALESCE(mem_max_c, reported_mem_max_c),"
            " COALESCE(tlimit_slowdown_c, reported_tlimit_slowdown_c) FROM fleet_gpu"
        )
    }
    rows = select_rows(
        "SELECT node_id, gpu, ts, temp_gpu_c, temp_gpu_c_ts, power_w, power_w_ts,"
        " clock_event_reasons, clock_event_reasons_ts, temp_mem_c, temp_mem_c_ts,"
        " temp_margin_c, temp_margin_c_ts FROM fw_gpu_latest ORDER BY node_id, gpu"
    )
    per_node: dict[int, list[Any]] = {}
    none3 = (None, None, None)
    for node, gpu, ts, t, tt, p, pt, m, mt, mem, memt, mg, mgt in rows:
        acc = per_node.get(node)
        if acc is None:  # count, fresh, power, temps, heads, thermal, power, level, ts
            acc = per_node[node] = [0, 0, [], [], [], 0, 0, 0, None]
        t = t if tt is not None and now - tt < stale else None
        m = m if mt is not None and now - mt < stale else None
        mem = mem if memt is not None and now - memt < stale else None
        mg = mg if mgt is not None and now - mgt < stale else None
        slow, mem_max, tlim = limits.get((node, gpu), none3)
        if t is not None and slow is not None:
            head = float(slow - t)
        elif mg is not None and tlim is not None:
            head = float(mg - tlim)
        else:
            head = None
        level = (
            1
            if head is None
            else 3
            if head <= th.HEADROOM_CRIT_C
            else (2 if head <= th.HEADROOM_WARN_C else 0)
        )
        if mem is not None and mem_max is not None:
            mh = float(mem_max - mem)
            level = max(
                level, 3 if mh <= th.HEADROOM_CRIT_C else 2 if mh <= th.HEADROOM_WARN_C else 0
            )
        if m is not None:
            m = int(m)
            level = max(level, 3 if m & th.CRIT_REASONS else 2 if m & th.WARN_REASONS else 0)
        acc[0] += 1
        if acc[7] < level:
            acc[7] = level
        if acc[8] is None or ts > acc[8]:
            acc[8] = ts
        if now - ts < stale:
            acc[1] += 1
            if p is not None and pt is not None and now - pt < stale:
                acc[2].append(float(p))
            if t is not None:
                acc[3].append(float(t))
            if head is not None:
                acc[4].append(head)
            if m is not None:
                acc[5] += bool(m & th.THERMAL_REASONS)
                acc[6] += bool(m & th.POWER_REASONS)
    return {
        node: health.GpuTotals(
            a[0],
            a[1],
            tuple(a[2]),
            max(a[3], default=None),
            min(a[4], default=None),
            a[5],
            a[6],
            rank[a[7]],
            a[8],
        )
        for node, a in per_node.items()
    }


def parts() -> dict[str, Callable[[], Any]]:
    """What GET / computes, part by part (the rest of the request is the template)."""
    from dashboard.overview import fleet_overview
    from fleet.read import state
    from fleet.read.site_summary import site_payloads

    now = time.time
    infos = state.rack_infos(None)
    node_ids = [n for info in infos.values() for n in info.nodes]
    loops = {i.loop_id for i in infos.values() if i.loop_id is not None}
    sites = {i.site_id for i in infos.values()}
    return {
        "rack_infos (inventory)": lambda: state.rack_infos(None),
        "node_gpu_totals (GPUs folded in SQL)": lambda: state.node_gpu_totals(None, now()),
        "lean_gpu_totals (the Python way, not taken)": lambda: lean_gpu_totals(now()),
        "summary_readings node + rack": lambda: (
            state.summary_readings("node", "node_id", node_ids),
            state.summary_readings("rack", "rack_id", infos),
        ),
        "loop_states": lambda: state.loop_states(loops, now()),
        "rack_summaries (all of the above + summaries)": lambda: state.rack_summaries(None, now()),
        "site_payloads (facility, alerts, agents)": lambda: site_payloads(sites, now()),
        "dashboard.overview.fleet_overview (all content)": lambda: fleet_overview(now()),
    }


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=12)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python"
        f" {platform.python_version()}; store: {args.db}; load average"
        f" {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    with large_inventory(args.db, args.gpus):
        from django.contrib.auth.models import User
        from django.test import Client

        from bench import rules_latest
        from fleet.read import state
        from fleet.read.state import rack_payload, rack_states, rack_summaries

        def refresh() -> None:
            rules_latest.refresh(time.time())

        now = time.time()
        old = {r: rack_payload(s) for r, s in rack_states(None, now).items()}
        new = {r: rack_payload(s) for r, s in rack_summaries(None, now).items()}
        differ = [r for r in old if old[r] != new.get(r)]
        print(f"payloads: {len(old)} racks, {len(differ)} differ", flush=True)
        if differ or set(old) != set(new):
            print("first difference:", old[differ[0]], new.get(differ[0]), sep="\n")
            return 1

        # The page first: the paths timed below update every latest row ~100 times, which
        # leaves PostgreSQL's table full of dead row versions until autovacuum comes by.
        user = User.objects.create_user(USER, password=PASSWORD, is_staff=True)
        client = Client(SERVER_NAME="127.0.0.1")
        client.force_login(user)

        def get() -> None:
            response = client.get("/")
            assert response.status_code == 200, response.status_code

        for _ in range(2):
            get()
        walls, cpus = [], []
        for _ in range(args.requests):
            refresh()
            wall, cpu = time.perf_counter(), time.process_time()
            get()
            walls.append((time.perf_counter() - wall) * 1000)
            cpus.append((time.process_time() - cpu) * 1000)
        print(
            f"GET / ({args.requests} requests): median {statistics.median(walls):.1f} ms,"
            f" p95 {p95(walls):.1f} ms, min {min(walls):.1f} ms; CPU median"
            f" {statistics.median(cpus):.1f} ms; load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        if args.profile:
            profile = cProfile.Profile()
            profile.runcall(get)
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(25)
            print(out.getvalue())

        def old_path() -> None:
            t = time.time()
            [rack_payload(s) for s in rack_states(None, t).values()]

        def new_path() -> None:
            t = time.time()
            [rack_payload(s) for s in rack_summaries(None, t).values()]

        lean = lean_gpu_totals(now)
        sql = state.node_gpu_totals(None, now)
        print(f"lean Python GPU totals equal the SQL ones: {lean == sql}", flush=True)

        old_ms = timed(old_path, args.requests, refresh)
        new_ms = timed(new_path, args.requests, refresh)
        print(f"rack_states + payloads:    wall {old_ms[0]:7.1f} ms, CPU {old_ms[1]:7.1f} ms")
        print(f"rack_summaries + payloads: wall {new_ms[0]:7.1f} ms, CPU {new_ms[1]:7.1f} ms")

        print("each part of the page's content (median ms):", flush=True)
        for name, part in parts().items():
            wall, cpu = timed(part, args.requests, refresh)
            print(f"  {name:<52} wall {wall:6.1f}  CPU {cpu:6.1f}", flush=True)

        print(
            f"fleet_page_ms={statistics.median(walls):.1f} p95_ms={p95(walls):.1f}"
            f" cpu_ms={statistics.median(cpus):.1f} rack_states_ms={old_ms[0]:.1f}"
            f" rack_summaries_ms={new_ms[0]:.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
