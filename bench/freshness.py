"""Freshness benchmark (issue 9, live views): `.venv/bin/python bench/freshness.py
[--db sqlite|postgres] [--seconds 60] [--gpus 10000] [--requests 20] [--skip-browser]
[--skip-page] [--live-s 0.5] [--latest-save-s S] [--profile]` (about 3½ minutes).

1. Sample → DOM. A real server (uvicorn + its ingest child, production live interval
   0.5 s) over the whole demo site (`seed_demo`), every node driven at 1 Hz over its own
   ingest WebSocket by bench/freshness_agents.py (all nodes sample at the same instant, as
   the simulator does), and Debian chromium (Playwright) logged in on the fleet page and on
   a GPU page (skipped, with a note, when /gpus/<id>/ does not answer 200). Each tick's
   GPU power is one step of a triangle wave, so the power a rack tile shows names the tick
   it comes from (a tile whose nodes straddle two ticks shows a sum between two levels:
   recognised and passed over). An init script stamps `Date.now()` whenever a watched
   figure's text changes (a MutationObserver) and each pushed message on arrival.
   For every GPU sample: the time from its `ts` (the agent's wall clock, same machine)
   until the figure first shows its whole rack (GPU page: its GPU) at that tick or a newer
   one — an upper bound per sample (its own node may have been in a mixed sum earlier);
   a tick never shown counts as +inf. Beside it, per rack and tick, the first push carrying
   that tick (rack `ts`): when the server began building it and when it arrived.
2. The fleet page for a 10,000-GPU inventory (bench/rules.py's plan: 500 racks, 1,250
   nodes × 8, every entity's latest state fresh), in this process through Django's test
   client with a logged-in user: median and p95 wall time of GET / over N requests after a
   warm-up, this process's CPU per request split by phase inside the same requests, the
   body size (raw; gzipped for reference, the server does not compress), and a cProfile of
   one request when the median is over the 300 ms target.

Prints progress and tables and, last, one line (p95_sample_to_dom_s: the worse page's):
  p95_sample_to_dom_s=X fleet_page_ms=X fleet_page_kb=X gpus=10000
Targets (the issue): p95_sample_to_dom_s ≤ 1, fleet_page_ms ≤ 300, fleet_page_kb ≤ 1024.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gzip
import io
import json
import math
import os
import platform
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.environment import use_bench_settings  # noqa: E402

use_bench_settings()

from bench.freshness_agents import BASE_W, GPUS_PER_NODE, STEP_W  # noqa: E402
from tests.support.agent import enroll  # noqa: E402
from tests.support.browser import CHROMIUM_ARGS, chromium_path  # noqa: E402
from tests.support.server import FleetServer  # noqa: E402

CHROMIUM = chromium_path() or "/usr/bin/chromium"
USER, PASSWORD = "bench", "bench-password-1"
WARMUP_S = 5  # ticks before the window: connections, first latest-state saves, first pushes
SETTLE_S = 6.0  # watched after the last tick (a quiet page refresh may show it)
TARGET_DOM_S, TARGET_PAGE_MS, TARGET_PAGE_KB = 1.0, 300.0, 1024.0

# Runs before the page's own scripts. Pushes: every message on a /ws/live/ socket, stamped
# on arrival (listeners added in the constructor run before the page's onmessage), with the
# `ts` of each rack it carries. DOM: after every batch of mutations (the MutationObserver
# callback, a microtask right after the script task that changed the page), each watched
# figure's text is read again and stamped when it changed. A watch is a selector, or a
# <dl> selector and the label of the <dt> whose <dd> (its .figure) holds the figure.
INIT_SCRIPT = """
(() => {
  const rec = { pushes: [], dom: [] };
  window.__fwBench = rec;
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      if (!String(args[0]).includes("/ws/live/")) return;
      this.addEventListener("message", (e) => {
        const at = Date.now();
        let msg;
        try { msg = JSON.parse(e.data); } catch (_) { return; }
        const racks = {};
        for (const [id, r] of Object.entries(msg.racks || {})) if (r && r.ts) racks[id] = r.ts;
        if (msg.rack && msg.rack.id && msg.rack.ts) racks[String(msg.rack.id)] = msg.rack.ts;
        rec.pushes.push({ at, ts: msg.ts || null, racks, bytes: e.data.length });
      });
    }
  };
  const watches = [], last = new Map();
  function read(w) {
    if (!w.label) {
      const el = document.querySelector(w.selector);
      return el ? el.textContent.trim() : null;
    }
    for (const dt of document.querySelectorAll(w.selector + " dt")) {
      if (dt.textContent.trim() !== w.label || !dt.nextElementSibling) continue;
      const dd = dt.nextElementSibling;
      return (dd.querySelector(".figure") || dd).textContent.trim();
    }
    return null;
  }
  function check() {
    const at = Date.now();
    for (const w of watches) {
      const text = read(w);
      if (text === null || last.get(w.key) === text) continue;
      last.set(w.key, text);
      rec.dom.push({ key: w.key, text, at });
    }
  }
  window.__fwBenchWatch = (list) => { watches.push(...list); check(); return watches.length; };
  document.addEventListener("DOMContentLoaded", () => {
    new MutationObserver(check).observe(
      document.body, { subtree: true, childList: true, characterData: true });
  });
})();
"""
WATCH = "(list) => window.__fwBenchWatch(list)"


# ---------------------------------------------------------------------------
# figures


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (inf when a value is inf: a sample never shown)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def fmt_s(value: float) -> str:
    return "never" if math.isinf(value) else "n/a" if math.isnan(value) else f"{value:.3f}"


@dataclass
class Tick:
    tick: int
    ts: float
    level: int
    ack_s: float | None


@dataclass
class PageLatency:
    """Per (watched element, tick): when it first showed that tick or a newer one."""

    page: str
    sample_to_dom: list[float] = field(default_factory=list)  # one per GPU sample
    per_key_tick: list[float] = field(default_factory=list)  # one per (element, tick)
    push_first: list[float] = field(default_factory=list)  # first push carrying the tick
    push_built: list[float] = field(default_factory=list)  # … its build started (its `ts`)
    mixed: int = 0  # DOM texts between two levels (nodes straddling ticks)
    never: int = 0  # (element, tick) pairs never shown
    pushes: int = 0
    push_bytes: int = 0


def decode_level(text: str, gpus: int) -> int | None:
    """The tick level a power text shows for `gpus` GPUs all at that level, else None.
    A rack tile shows kW to 0.1 (one node one step off moves it by 0.16 kW), a GPU page
    "300 W"."""
    try:
        value = float(text.split()[0])
    except (ValueError, IndexError):
        return None
    watts, slack = (value, 0.6) if text.split()[1:2] == ["W"] else (value * 1000, 60.0)
    lvl = round((watts / gpus - BASE_W) / STEP_W)
    return lvl if abs(watts - gpus * (BASE_W + STEP_W * lvl)) <= slack else None


@dataclass
class Watch:
    """A figure watched on a page: the GPUs its one tick stands for, its rack."""

    key: str
    selector: str
    gpus: int
    rack: str
    label: str | None = None  # a <dl> figure: the <dt> text


def page_latency(
    page: str, records: dict[str, Any], ticks: list[Tick], start: float, watches: list[Watch]
) -> PageLatency:
    out = PageLatency(page)
    gpus_per_key = {w.key: w.gpus for w in watches}
    # first time each (key, tick) was shown whole: a text maps to the latest tick at
    # that level taken before it appeared
    first: dict[tuple[str, int], float] = {}
    for rec in records["dom"]:
        key, at = rec["key"], rec["at"] / 1000
        if key not in gpus_per_key:
            continue
        lvl = decode_level(rec["text"], gpus_per_key[key])
        if lvl is None:
            out.mixed += rec["text"][:1].isdigit()  # not "–", "not reported"
            continue
        shown = [t for t in ticks if t.level == lvl and t.ts <= at]
        if shown:
            first.setdefault((key, shown[-1].tick), at)
    pushed: dict[tuple[str, float], tuple[float, float]] = {}  # (arrived, built)
    for push in records["pushes"]:
        out.pushes += 1
        out.push_bytes += push["bytes"]
        for key, ts in push["racks"].items():
            pushed.setdefault((key, round(ts, 3)), (push["at"] / 1000, push["ts"] or math.nan))
    for w in watches:
        seen = sorted((t, at) for (k, t), at in first.items() if k == w.key)
        for tick in ticks:
            if tick.ts < start:
                continue
            later = [at for t, at in seen if t >= tick.tick]
            latency = min(later) - tick.ts if later else math.inf
            out.never += not later
            out.per_key_tick.append(latency)
            out.sample_to_dom.extend([latency] * w.gpus)
            push = pushed.get((w.rack, round(tick.ts, 3)))
            if push is not None:
                out.push_first.append(push[0] - tick.ts)
                out.push_built.append(push[1] - tick.ts)
    return out


# ---------------------------------------------------------------------------
# 1. sample → DOM, in a real browser


@dataclass
class BrowserRun:
    pages: list[PageLatency]
    ticks: list[Tick]
    notes: list[str]
    agent_errors: list[str]
    nodes: int


def fleet_server(
    var_dir: Path, args: argparse.Namespace
) -> contextlib.AbstractContextManager[FleetServer]:
    env = {
        "FLEETWATCH_LIVE_INTERVAL_S": f"{args.live_s:g}",  # production 0.5 (tests: 0.2)
        "FLEETWATCH_REVALIDATE_S": "5",
        "DJANGO_SUPERUSER_PASSWORD": PASSWORD,
    }
    if args.latest_save_s is not None:  # else the live interval, as in production
        env["FLEETWATCH_LATEST_SAVE_S"] = f"{args.latest_save_s:g}"
    return FleetServer.started(
        var_dir,
        tier="services" if args.db == "postgres" else "embedded",
        racks=1000,  # `seed_demo --racks N` seeds the first N: the whole demo site
        extra_env=env,
    )


def enroll_nodes(server: FleetServer, path: Path) -> dict[str, int]:
    """Enrol every node as its agent would; returns the inventory's GPUs per rack id (as
    text). Counted, not assumed 8 a node: the demo's GB200 trays hold 4 (the agents send 8;
    the server leaves out the GPUs a node does not have), and a tile sums only real GPUs."""
    rows = server.query("SELECT name, rack_id FROM fleet_node ORDER BY name")
    sources = [f"node:{name}" for name, _ in rows]
    creds = [{"source": source, "token": enroll(server, source)} for source in sources]
    path.write_text(json.dumps(creds))
    gpus = server.query(
        "SELECT n.rack_id, COUNT(*) FROM fleet_gpu g JOIN fleet_node n ON n.id = g.node_id"
        " GROUP BY n.rack_id"
    )
    return {str(rack_id): int(count) for rack_id, count in gpus}


def login(page: Any, server: FleetServer) -> None:
    page.goto(server.url + "/admin/login/?next=/")
    page.fill("#id_username", USER)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(server.url + "/")


def run_agents(server: FleetServer, creds: Path, ticks: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "bench" / "freshness_agents.py"),
            "--url",
            f"{server.ws_url}/ws/ingest/v1",
            "--creds",
            str(creds),
            "--ticks",
            str(ticks),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def browser_freshness(args: argparse.Namespace) -> BrowserRun:
    from playwright.sync_api import sync_playwright

    notes: list[str] = []
    with (
        tempfile.TemporaryDirectory(prefix="fw-bench-fresh-") as tmp,
        fleet_server(Path(tmp), args) as server,
    ):
        server.manage("createsuperuser", "--noinput", "--username", USER, "--email", "b@x.io")
        creds = Path(tmp) / "creds.json"
        gpus_per_rack = enroll_nodes(server, creds)
        print(
            f"server up ({args.db}); {len(gpus_per_rack)} racks,"
            f" {sum(gpus_per_rack.values())} GPUs enrolled",
            flush=True,
        )
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            context.add_init_script(INIT_SCRIPT)
            fleet = context.new_page()
            login(fleet, server)
            fleet.wait_for_selector("#live-status[data-state='live']")
            fleet_watches = [
                Watch(rack, f"#rack-{rack} [data-field=power]", gpus, rack)
                for rack, gpus in gpus_per_rack.items()
            ]
            fleet.evaluate(WATCH, [w.__dict__ for w in fleet_watches])
            print(f"fleet page open and live; {len(fleet_watches)} rack tiles watched", flush=True)
            gpu, gpu_watches = open_gpu_page(context, server, notes)
            agents = run_agents(server, creds, WARMUP_S + args.seconds)
            out, err = agents.communicate(timeout=WARMUP_S + args.seconds + 120)
            if agents.returncode:
                raise RuntimeError(f"agent loop failed:\n{err[-3000:]}")
            time.sleep(SETTLE_S)
            records = {"fleet": fleet.evaluate("window.__fwBench")}
            if gpu is not None:
                records["gpu"] = gpu.evaluate("window.__fwBench")
            browser.close()
    result = json.loads(out.strip().splitlines()[-1])
    ticks = [Tick(t["tick"], t["ts"], t["level"], t["ack_s"]) for t in result["ticks"]]
    start = ticks[WARMUP_S].ts
    pages = [page_latency("fleet", records["fleet"], ticks, start, fleet_watches)]
    if "gpu" in records:
        pages.append(page_latency("gpu", records["gpu"], ticks, start, gpu_watches))
    return BrowserRun(pages, ticks, notes, result["errors"], result["nodes"])


def open_gpu_page(context: Any, server: FleetServer, notes: list[str]) -> tuple[Any, list[Watch]]:
    """A GPU page (GPU 3 of the first node of rack A02, 16 nodes) with its power figure
    watched; (None, []) with a note when the page is not built yet or has no such figure."""
    gpu_id, rack_id = server.query(
        "SELECT g.id, n.rack_id FROM fleet_gpu g JOIN fleet_node n ON n.id = g.node_id"
        " JOIN fleet_rack r ON r.id = n.rack_id WHERE r.name = 'A02' AND g.\"index\" = 3"
        " ORDER BY n.name LIMIT 1"
    )[0]
    page = context.new_page()
    response = page.goto(f"{server.url}/gpus/{gpu_id}/")
    if response is None or response.status != 200:
        status = "no response" if response is None else response.status
        notes.append(f"GPU page /gpus/{gpu_id}/ answered {status}: not measured (not built yet?)")
        page.close()
        return None, []
    watches = [Watch(f"gpu-{gpu_id}", "#gpu-figures", 1, str(rack_id), "Power")]
    page.evaluate(WATCH, [w.__dict__ for w in watches])
    if page.evaluate("window.__fwBench.dom.length") == 0:
        notes.append(f"GPU page /gpus/{gpu_id}/: no 'Power' figure in #gpu-figures, not measured")
        page.close()
        return None, []
    print(f"GPU page /gpus/{gpu_id}/ open; its power figure watched", flush=True)
    return page, watches


def print_browser(run: BrowserRun, args: argparse.Namespace) -> None:
    seconds, nodes = args.seconds, run.nodes
    save = args.live_s if args.latest_save_s is None else args.latest_save_s
    measured = [t for t in run.ticks[WARMUP_S:]]
    acks = [t.ack_s for t in measured if t.ack_s is not None]
    print()
    print(
        f"sample → DOM: {len(measured)} ticks at 1 Hz ({seconds} s after {WARMUP_S} s warm-up),"
        f" {nodes} nodes × {GPUS_PER_NODE} GPUs; live interval {args.live_s:g} s,"
        f" latest-state save every {save:g} s"
    )
    if acks:
        print(
            f"  sample → durable ack (the last of a tick's {nodes} batches):"
            f" p50 {fmt_s(percentile(acks, 50))}"
            f"  p95 {fmt_s(percentile(acks, 95))}  max {fmt_s(max(acks))} s"
        )
    print(f"  {'page':8s} {'measure':44s} {'n':>6s} {'p50 s':>7s} {'p95 s':>7s} {'max s':>7s}")
    for page in run.pages:
        rows = (
            ("sample → DOM, per GPU sample (upper bound)", page.sample_to_dom),
            ("sample → DOM, per tile and tick", page.per_key_tick),
            ("sample → first push with it (lower bound)", page.push_first),
            ("  of which: sample → that push's build began", page.push_built),
        )
        for label, values in rows:
            print(
                f"  {page.page:8s} {label:44s} {len(values):6d} {fmt_s(percentile(values, 50)):>7s}"
                f" {fmt_s(percentile(values, 95)):>7s}"
                f" {fmt_s(max(values) if values else math.nan):>7s}"
            )
        print(
            f"  {page.page:8s} {page.pushes} pushes ({page.push_bytes / max(1, page.pushes):.0f} B"
            f" each on average); tile texts between two ticks: {page.mixed};"
            f" (tile, tick) never shown: {page.never}"
        )
    for note in run.notes:
        print(f"  note: {note}")
    if run.agent_errors:
        print(f"  agent errors (first {len(run.agent_errors)}): {run.agent_errors}")


# ---------------------------------------------------------------------------
# 2. the fleet page for a large inventory


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
    from bench import rules

    racks = max(2, round(gpus / 20))
    rules.RACKS, rules.LOOPS = racks, max(1, math.ceil(racks / rules.RACKS_PER_LOOP))
    rules.NODES = sum(rules.nodes_in_rack(i) for i in range(racks))
    with rules.bench_database(db_kind, "fw-bench-page-") as db:
        rules.setup_django(db)
        started = time.perf_counter()
        inv = rules.build_inventory()
        rules.fill_latest(inv, time.time())
        took = time.perf_counter() - started
        print(
            f"inventory: {rules.NODES * rules.GPUS_PER_NODE} GPUs, {racks} racks,"
            f" latest state filled ({took:.1f} s)",
            flush=True,
        )
        yield rules.NODES * rules.GPUS_PER_NODE


def time_fleet_page(args: argparse.Namespace) -> PageTiming:
    with large_inventory(args.db, args.gpus) as gpus:
        from django.contrib.auth.models import User
        from django.test import Client

        from bench import rules

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
                rules.refresh(time.time())  # a live fleet: every sample time moves on
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
            rules.RACKS,
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
            return  # renamed: that phase reads 0 and the remainder absorbs it

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
    """Reads of the latest state (`fleet.read.state` readers, as `rack_states` calls them),
    `rack_states` as the overview calls it, and the overview as the view calls it."""
    import dashboard.overview
    import dashboard.views
    from fleet.read import state

    clock = PhaseClock()
    for name in ("rack_infos", "_readings", "gpu_limits"):
        clock.wrap(state, name, "read")
    clock.wrap(dashboard.overview, "rack_states", "rack_states")
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
        "read": "read the latest state (fleet.read.state: rack_infos, _readings, gpu_limits)",
        "derive": "derive figures (the rest of rack_states: node and rack summaries)",
        "payloads": "rack payloads, tiles, site strips (the rest of dashboard.overview)",
        "render": "template render, middleware, session (the rest of the request)",
    }
    print("  CPU per request by phase (medians over the timed requests):")
    for name, label in labels.items():
        print(f"    {label:76s} {page.phases_ms[name]:7.1f} ms")
    if page.profile:
        print("  cProfile of one request:")
        print(page.profile)


# ---------------------------------------------------------------------------


def verdict(value: float, target: float) -> str:
    return "not measured" if math.isnan(value) else "met" if value <= target else "NOT MET"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--seconds", type=int, default=60, help="measured ticks (1 Hz)")
    parser.add_argument("--gpus", type=int, default=10_000, help="GPUs for the fleet page")
    parser.add_argument("--requests", type=int, default=20, help="timed GET / requests")
    parser.add_argument("--skip-browser", action="store_true", help="only the large fleet page")
    parser.add_argument("--skip-page", action="store_true", help="only the browser part")
    parser.add_argument("--live-s", type=float, default=0.5, help="FLEETWATCH_LIVE_INTERVAL_S")
    parser.add_argument(
        "--latest-save-s", type=float, help="FLEETWATCH_LATEST_SAVE_S (default: the live interval)"
    )
    parser.add_argument("--profile", action="store_true", help="cProfile GET / even if fast")
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python"
        f" {platform.python_version()}; store: {args.db}",
        flush=True,
    )
    p95_dom = math.nan
    if not args.skip_browser and not Path(CHROMIUM).exists():
        print("no Debian chromium (apt-get install chromium): sample → DOM not measured")
    elif not args.skip_browser:
        run = browser_freshness(args)
        print_browser(run, args)
        p95 = {page.page: percentile(page.sample_to_dom, 95) for page in run.pages}
        p95_dom = max(p95.values())
        print(
            "p95 sample → DOM per page (the last line gives the worst): "
            + ", ".join(f"{page}={fmt_s(v)} s" for page, v in p95.items())
        )
    dom = "skipped" if math.isnan(p95_dom) else "inf" if math.isinf(p95_dom) else f"{p95_dom:.3f}"
    if args.skip_page:
        print(f"p95_sample_to_dom_s={dom} fleet_page_ms=skipped fleet_page_kb=skipped gpus=0")
        return 0
    page = time_fleet_page(args)
    print_page(page, args.requests)
    page_ms, page_kb = statistics.median(page.times_ms), page.body_bytes / 1024
    print(
        "targets: "
        + "; ".join(
            f"{name} ≤ {target:g}: {verdict(value, target)}"
            for name, value, target in (
                ("p95_sample_to_dom_s", p95_dom, TARGET_DOM_S),
                ("fleet_page_ms", page_ms, TARGET_PAGE_MS),
                ("fleet_page_kb", page_kb, TARGET_PAGE_KB),
            )
        )
    )
    print(
        f"p95_sample_to_dom_s={dom} fleet_page_ms={page_ms:.1f}"
        f" fleet_page_kb={page_kb:.1f} gpus={page.gpus}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
