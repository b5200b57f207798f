"""Prometheus pull and /metrics render, issue 10's two halves, for a large fleet.

    .venv/bin/python bench/prometheus.py [--db sqlite|postgres] [--gpus 8000] [--pulls 3]
                                         [--profile]

1. A fresh, migrated database (SQLite file, or a new PostgreSQL database) with
   bench/rules.py's inventory (1,250 nodes × 8 = 10,000 GPUs, every GPU with a UUID). A
   local exporter serves dcgm-exporter text for the first `--gpus` GPUs × 10 fields
   (80,000 series; labels as dcgm-exporter 4.x writes them); a real Prometheus (Debian's
   /usr/bin/prometheus) scrapes it every 10 s. The bench waits, polling Prometheus' API,
   until every series is there.
2. One warm-up pull (the first of a source), then `--pulls` pull cycles, each once the
   next scrape is visible to a pull: `fleet.ingest.prometheus.pull.pull_source` — the queries,
   matching, conversion and the write through `write_samples` with latest state — timed
   end to end, with the CPU seconds it and Prometheus spent. pull_s is their median.
3. metrics_render_s: `fleet.read.metrics.export.render` on the 10,000-GPU inventory with
   every GPU's latest state filled, as bench/metrics_export.py does (median of 3).

Last line: `series=80000 pull_s=X metrics_render_s=X gpus=10000`. Targets: pull_s ≤ 2,
metrics_render_s ≤ 1; a miss prints a cProfile of one more pull.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.environment import use_bench_settings

use_bench_settings()

from bench.rules_database import bench_database, setup_django  # noqa: E402
from bench.rules_inventory import GPUS_PER_NODE, NODES, build_inventory  # noqa: E402
from bench.rules_latest import fill_latest  # noqa: E402
from tests.support.prometheus_pull import Exporter, Prometheus, labels_text  # noqa: E402

PULL_TARGET_S, RENDER_TARGET_S = 2.0, 1.0
FIELDS = (
    ("DCGM_FI_DEV_GPU_TEMP", 61),
    ("DCGM_FI_DEV_MEMORY_TEMP", 70),
    ("DCGM_FI_DEV_POWER_USAGE", 650.25),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 9_876_543_210),
    ("DCGM_FI_DEV_SM_CLOCK", 1980),
    ("DCGM_FI_DEV_MEM_CLOCK", 2619),
    ("DCGM_FI_DEV_GPU_UTIL", 97),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", 40),
    ("DCGM_FI_DEV_FB_USED", 120_000),
    ("DCGM_FI_DEV_XID_ERRORS", 0),
)


def exporter_text(gpus: list[tuple[str, int, str]]) -> bytes:
    """dcgm-exporter's text for (node name, index, UUID) GPUs, every field of FIELDS."""
    lines: list[str] = []
    labelled = [
        labels_text(
            {
                "gpu": str(index),
                "UUID": uuid,
                "pci_bus_id": f"00000000:{0x18 + index:02X}:00.0",
                "device": f"nvidia{index}",
                "modelName": "NVIDIA H200",
                "Hostname": node,
                "DCGM_FI_DRIVER_VERSION": "580.105.08",
            }
        )
        for node, index, uuid in gpus
    ]
    for name, value in FIELDS:
        lines += [f"# HELP {name} {name}.", f"# TYPE {name} gauge"]
        lines += [f"{name}{{{text}}} {value}" for text in labelled]
    return ("\n".join(lines) + "\n").encode()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--gpus", type=int, default=8000)
    parser.add_argument("--pulls", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    with bench_database(args.db, "fw-bench-prom-") as db:
        setup_django(db)
        return run(args, db.var_dir)


def run(args: argparse.Namespace, tmp: Path) -> int:
    from fleet.ingest.prometheus.pull import pull_source
    from fleet.models import GPU, PrometheusSource, Site, SourceToken

    inv = build_inventory()
    SourceToken.objects.update(last_seen=None)  # no agent reports: Prometheus feeds them all
    gpus = list(
        GPU.objects.order_by("node__rack__position", "node__position", "index").values_list(
            "node__name", "index", "uuid"
        )[: args.gpus]
    )
    series = len(gpus) * len(FIELDS)
    exporter = Exporter()
    exporter.body = exporter_text(gpus)
    print(f"exporter: {series} series, {len(exporter.body) / 1e6:.1f} MB per scrape")
    prom = Prometheus(tmp / "prom", f"127.0.0.1:{exporter.port}", interval="10s")
    try:
        started = time.monotonic()
        prom.wait_for('{__name__=~"DCGM_FI_.*"}', series, timeout=300)
        print(f"prometheus holds all {series} series after {time.monotonic() - started:.1f} s")
        source = PrometheusSource.objects.create(
            name="bench", site=Site.objects.get(), url=prom.url, lookback_s=60
        )
        pull_times = pull_cycles(source, prom, args.pulls)
        if statistics.median(pull_times) > PULL_TARGET_S or args.profile:
            wait_next_scrape(prom, source.last_sample_ts or 0)
            profile(lambda: pull_source(source))
    finally:
        prom.stop()
        exporter.close()
    render_s = render_time(inv)
    pull_s = statistics.median(pull_times)
    print(
        f"targets: pull_s ≤ {PULL_TARGET_S}: {'met' if pull_s <= PULL_TARGET_S else 'MISSED'};"
        f" metrics_render_s ≤ {RENDER_TARGET_S}:"
        f" {'met' if render_s <= RENDER_TARGET_S else 'MISSED'}"
    )
    print(
        f"series={series} pull_s={pull_s:.3f} metrics_render_s={render_s:.3f}"
        f" gpus={NODES * GPUS_PER_NODE}"
    )
    return 0


def pull_cycles(source: object, prom: Prometheus, pulls: int) -> list[float]:
    from fleet.ingest.prometheus.pull import pull_source
    from fleet.models import PrometheusSource

    assert isinstance(source, PrometheusSource)
    start = time.perf_counter()
    summary = pull_source(source)
    print(f"warm-up pull (whole look-back): {time.perf_counter() - start:.3f} s {summary}")
    times = []
    for _ in range(pulls):
        wait_next_scrape(prom, source.last_sample_ts or 0)
        cpu, prom_cpu = time.process_time(), cpu_seconds(prom.proc.pid)
        start = time.perf_counter()
        summary = pull_source(source)
        times.append(time.perf_counter() - start)
        # CPU seconds say what the pull costs whatever else the machine is doing.
        used = time.process_time() - cpu
        prom_used = cpu_seconds(prom.proc.pid) - prom_cpu
        load = os.getloadavg()[0]
        print(
            f"pull: {times[-1]:.3f} s (cpu: this process {used:.2f} s, prometheus"
            f" {prom_used:.2f} s; load {load:.1f}) {summary}"
        )
    return times


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_next_scrape(prom: Prometheus, after: float) -> None:
    """Until Prometheus holds a scrape newer than `after` (polling its API)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        result = prom.query("max(timestamp(DCGM_FI_DEV_GPU_TEMP offset 1s))")  # as a pull sees it
        if result and float(result[0]["value"][1]) > after:
            return
        time.sleep(0.25)
    raise TimeoutError("no new scrape within 60 s")


def render_time(inv: object) -> float:
    from fleet.read.metrics.export import render

    fill_latest(inv, time.time() - 1.0)  # type: ignore[arg-type]
    render(time.time())  # warm-up (imports, caches)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        render(time.time())
        times.append(time.perf_counter() - start)
    print(f"renders: {', '.join(f'{t:.3f}' for t in times)} s")
    return statistics.median(times)


def profile(work: object) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    work()  # type: ignore[operator]
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(25)
    print(out.getvalue())


if __name__ == "__main__":
    raise SystemExit(main())
