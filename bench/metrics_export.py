"""/metrics render time (fleet/read/metrics/export.py) for a 10,000-GPU fleet: the
inventory and latest state of bench/rules.py (1,250 nodes × 8 GPUs, 500 racks, 20 CDUs,
every GPU reporting), rendered in-process as the view does.

    .venv/bin/python bench/metrics_export.py [--db sqlite|postgres] [--renders N]

Last line: `gpus=10000 metrics_render_s=X metrics_kb=X series=X` (render_s: the median).
bench/prometheus.py times the pull half against a real Prometheus and calls this render too.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.environment import use_bench_settings

use_bench_settings()

from bench.rules_database import BenchDb, bench_database, setup_django  # noqa: E402
from bench.rules_inventory import GPUS_PER_NODE, NODES, build_inventory  # noqa: E402
from bench.rules_latest import fill_latest  # noqa: E402

TARGET_S = 1.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--renders", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    with bench_database(args.db, "fw-bench-metrics-") as db:
        return run(args, db)


def run(args: argparse.Namespace, db: BenchDb) -> int:
    setup_django(db)
    inv = build_inventory()
    now = time.time()
    fill_latest(inv, now - 1.0)
    from fleet.read.metrics.export import render

    text = render(now)  # warm-up (imports, caches)
    times = []
    for _ in range(args.renders):
        start = time.perf_counter()
        text = render(time.time())
        times.append(time.perf_counter() - start)
    series = sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
    median = statistics.median(times)
    print(f"renders: {', '.join(f'{t:.3f}' for t in times)} s on {args.db}")
    if median > TARGET_S or args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        render(time.time())
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(25)
        print(out.getvalue())
    print(
        f"gpus={NODES * GPUS_PER_NODE} metrics_render_s={median:.3f}"
        f" metrics_kb={len(text) / 1024:.0f} series={series}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
