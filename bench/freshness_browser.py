"""Part 1 of bench/freshness.py, sample → DOM in a real browser: a server over the whole demo
site, every node driven at 1 Hz by bench/freshness_agents.py, and Debian chromium on the
fleet page and a GPU page stamping each watched figure's changes and each push."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.freshness_agents import GPUS_PER_NODE
from bench.freshness_latency import PageLatency, Tick, Watch, fmt_s, page_latency, percentile
from bench.freshness_page import PASSWORD, USER
from tests.support.agent import enroll
from tests.support.browser import CHROMIUM_ARGS, chromium_path
from tests.support.server import FleetServer

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = chromium_path() or "/usr/bin/chromium"
WARMUP_S = 5  # ticks before the window: connections, first latest-state saves, first pushes
SETTLE_S = 6.0  # watched after the last tick (a quiet page refresh may show it)

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
