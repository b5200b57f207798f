"""Part 2 of bench/freshness.py, the fleet page for a large inventory: bench/rules.py's
inventory and latest state scaled to N GPUs (also bench/fleet_page.py's), and GET / timed in
this process through Django's test client, its CPU split by phase, its body measured."""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gzip
import io
import math
import os
import pstats
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# the plan through its module: `large_inventory` scales it by setting RACKS, LOOPS, NODES
from bench import rules_inventory as plan
from bench.freshness_latency import percentile
from bench.rules_database import bench_database, setup_django
from bench.rules_latest import fill_latest, refresh

USER, PASSWORD = "bench", "bench-password-1"  # also the browser part's and fleet_page.py's
TARGET_PAGE_MS, TARGET_PAGE_KB = 300.0, 1024.0  # the issue's; a slower median is profiled


@dataclass
class PageTiming:
    gpus: int
    racks: int
    times_ms: list[float]
    cpu_ms: list[float]  # this process's CPU (the view, SQLite and the template all run here)
    body_bytes: int
    gzip_bytes: int
    json_bytes: int  # of the body: the page's initial payload (<script id="fleet-data">)
    phases_ms: dict[str, float]  # CPU per request by phase, medians
    profile: str | None
    load: float  # 1-minute load average when done (2 cores; other work shares them)


@contextlib.contextmanager
def large_inventory(db_kind: str, gpus: int) -> Iterator[int]:
    """bench/rules.py's inventory and latest state, scaled to about `gpus` GPUs (500 racks
    for 10,000; its racks alternate 3 and 2 nodes of 8 GPUs, 25 racks a cooling loop)."""
    racks = max(2, round(gpus / 20))
    plan.RACKS, plan.LOOPS = racks, max(1, math.ceil(racks / plan.RACKS_PER_LOOP))
    plan.NODES = sum(plan.nodes_in_rack(i) for i in range(racks))
    with bench_database(db_kind, "fw-bench-page-") as db:
        setup_django(db)
        started = time.perf_counter()
        inv = plan.build_inventory()
        fill_latest(inv, time.time())
        took = time.perf_counter() - started
        print(
            f"inventory: {plan.NODES * plan.GPUS_PER_NODE} GPUs, {racks} racks,"
            f" latest state filled ({took:.1f} s)",
            flush=True,
        )
        yield plan.NODES * plan.GPUS_PER_NODE


def time_fleet_page(args: argparse.Namespace) -> PageTiming:
    with large_inventory(args.db, args.gpus) as gpus:
        from django.contrib.auth.models import User
        from django.test import Client

        user = User.objects.create_user(USER, password=PASSWORD, is_staff=True)
        client = Client(SERVER_NAME="127.0.0.1")
        client.force_login(user)

        def get() -> tuple[float, float, bytes]:
            started, cpu = time.perf_counter(), time.process_time()
            response = client.get("/")
            took = (time.perf_counter() - started) * 1000
            cpu_ms = (time.process_time() - cpu) * 1000
            assert response.status_code == 200, response.status_code
            return took, cpu_ms, response.content

        for _ in range(2):
            get()  # warm-up: templates compiled, connection open
        times, cpu_times, body = [], [], b""
        per_request: list[dict[str, float]] = []
        with phase_clock() as clock:
            for _ in range(args.requests):
                refresh(time.time())  # a live fleet: every sample time moves on
                took, cpu_ms, body = get()
                times.append(took)
                cpu_times.append(cpu_ms)
                per_request.append(split_phases(cpu_ms / 1000, clock.take()))
        phases = {k: statistics.median(p[k] for p in per_request) for k in per_request[0]}
        profile = None
        if statistics.median(times) > TARGET_PAGE_MS or args.profile:
            profile = profile_page(get)
        return PageTiming(
            gpus,
            plan.RACKS,
            times,
            cpu_times,
            len(body),
            len(gzip.compress(body)),
            json_script_bytes(body, b"fleet-data"),
            phases,
            profile,
            os.getloadavg()[0],
        )


def json_script_bytes(body: bytes, element_id: bytes) -> int:
    start = body.find(b'id="' + element_id + b'"')
    end = body.find(b"</script>", start)
    return 0 if start < 0 or end < 0 else end - start


class PhaseClock:
    """CPU spent inside given module functions during a request, per phase (patched in
    for the timed requests: every phase of the same requests, so they add up)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}
        self._undo: list[tuple[Any, str, Any]] = []

    def wrap(self, module: Any, name: str, phase: str) -> None:
        original = getattr(module, name, None)
        if original is None:
            # Renamed or no longer called from here: a phase that silently read 0 printed
            # negative remainders; say so instead.
            raise AttributeError(f"{module.__name__}.{name} is gone: update the bench's phases")

        def timed(*a: Any, **kw: Any) -> Any:
            started = time.process_time()
            try:
                return original(*a, **kw)
            finally:
                self.spent[phase] = self.spent.get(phase, 0.0) + time.process_time() - started

        setattr(module, name, timed)
        self._undo.append((module, name, original))

    def take(self) -> dict[str, float]:
        spent, self.spent = self.spent, {}
        return spent

    def close(self) -> None:
        for module, name, original in reversed(self._undo):
            setattr(module, name, original)


@contextlib.contextmanager
def phase_clock() -> Iterator[PhaseClock]:
    """Reads of the latest state (`fleet.read.state` readers, as `rack_summaries` calls
    them), `rack_summaries` as the overview calls it, and the overview as the view calls it."""
    import dashboard.overview
    import dashboard.views
    from fleet.read import state

    clock = PhaseClock()
    for name in ("rack_infos", "node_gpu_totals", "summary_readings"):
        clock.wrap(state, name, "read")
    clock.wrap(dashboard.overview, "rack_summaries", "rack_states")
    clock.wrap(dashboard.views, "build_overview", "overview")
    try:
        yield clock
    finally:
        clock.close()


def split_phases(get_cpu_s: float, spent: dict[str, float]) -> dict[str, float]:
    """One request's CPU, in ms, by phase."""
    read, states = spent.get("read", 0.0), spent.get("rack_states", 0.0)
    overview = spent.get("overview", 0.0)
    return {
        "read": 1000 * read,
        "derive": 1000 * (states - read),
        "payloads": 1000 * (overview - states),
        "render": 1000 * (get_cpu_s - overview),
    }


def profile_page(get: Any, top: int = 20) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    get()
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return text.getvalue()


def print_page(page: PageTiming, requests: int) -> None:
    print()
    print(
        f"fleet page GET / for {page.gpus} GPUs ({page.racks} racks), in-process test client,"
        f" {requests} requests after 2 warm-up:"
    )
    print(
        f"  server time: median {statistics.median(page.times_ms):.1f} ms,"
        f" p95 {percentile(page.times_ms, 95):.1f} ms, min {min(page.times_ms):.1f} ms,"
        f" max {max(page.times_ms):.1f} ms"
    )
    print(
        f"  CPU of this process per request: median {statistics.median(page.cpu_ms):.1f} ms,"
        f" p95 {percentile(page.cpu_ms, 95):.1f} ms (load average {page.load:.1f} on"
        f" {os.cpu_count()} cores)"
    )
    print(
        f"  body: {page.body_bytes / 1024:.1f} KiB raw ({page.json_bytes / 1024:.1f} KiB of it the"
        f" initial JSON payload), {page.gzip_bytes / 1024:.1f} KiB gzipped (the server does not"
        " compress)"
    )
    labels = {
        "read": "read the latest state (rack_infos, node_gpu_totals, summary_readings)",
        "derive": "derive figures (the rest of rack_summaries: loops, levels)",
        "payloads": "rack payloads, tiles, site strips (the rest of dashboard.overview)",
        "render": "template render, middleware, session (the rest of the request)",
    }
    print("  CPU per request by phase (medians over the timed requests):")
    for name, label in labels.items():
        print(f"    {label:76s} {page.phases_ms[name]:7.1f} ms")
    if page.profile:
        print("  cProfile of one request:")
        print(page.profile)
