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
import math
import os
import platform
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.environment import use_bench_settings  # noqa: E402

use_bench_settings()

from bench.freshness_browser import CHROMIUM, browser_freshness, print_browser  # noqa: E402
from bench.freshness_latency import fmt_s, percentile  # noqa: E402
from bench.freshness_page import (  # noqa: E402
    TARGET_PAGE_KB,
    TARGET_PAGE_MS,
    print_page,
    time_fleet_page,
)

TARGET_DOM_S = 1.0


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
