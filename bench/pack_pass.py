"""One packer pass's CPU, against PostgreSQL: `.venv/bin/python bench/pack_pass.py
[--gpus 2000] [--span-min 5] [--profile FILE]`.

What the packer (fleet/storage/packed.py) costs per GPU sample it seals, apart from the
rest of bench/peer.py's run: a fresh database with bench/rules.py's inventory, one span of
`--span-min` minutes of bench/peer.py's value stream (every node of 8 GPUs once a second,
the H200 trace's 15 fields) stored through the ingest pipeline, the 1-minute rollup marked
past it, then `pack_span` timed: this process's CPU (the maintenance worker's share) and its
PostgreSQL backend's, over the span's GPU samples. Last line:

  gpus=N span_min=M worker_us_per_gpu_sample=X pg_us_per_gpu_sample=X pass_s=X
"""

from __future__ import annotations

import argparse
import cProfile
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.environment import use_bench_settings  # noqa: E402

os.environ["FLEETWATCH_RAW_PACK_MINUTES"] = "5"  # replaced by --span-min in main()
use_bench_settings()

from bench.ingest_round import backend_cpu_s  # noqa: E402
from bench.peer_agents import TraceBatches  # noqa: E402
from bench.peer_stream import Stream  # noqa: E402
from bench.scale import bench_database, setup_inventory  # noqa: E402
from bench.scale_agents import GPUS_PER_NODE  # noqa: E402


def store_span(sources: list[str], start: int, seconds: int) -> int:
    """`seconds` of samples from `start`, stored as the ingest child stores them."""
    from django.conf import settings

    from fleet.ingest.pipeline import IngestPipeline
    from fleet.models import SourceToken
    from fleet.storage.db import open_db
    from fleet.storage.partitions import ensure_raw_ahead

    db = open_db(dict(settings.DATABASES["default"]))
    ensure_raw_ahead(db, start)
    pipeline = IngestPipeline(db, save_interval_s=5.0, raw_keep_s=7 * 86400)
    site_of = dict(SourceToken.objects.values_list("source", "site_id"))
    for conn_id, source in enumerate(sources, 1):
        pipeline.hello(conn_id, source, site_of[source])
    render = TraceBatches(Stream(start), sources).render
    stored = 0
    for tick in range(seconds):
        ts = start + tick
        for first in range(0, len(sources), 32):
            frames = [
                (m + 1, render(sources[m], tick, ts, tick))
                for m in range(first, min(first + 32, len(sources)))
            ]
            for result in pipeline.process(frames, ts + 0.5):
                if result.code != 0:
                    raise SystemExit(f"batch refused: {result}")
                stored += GPUS_PER_NODE
    pipeline.flush(start + seconds + 1.0)
    db.close()
    return stored


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", type=int, default=2000)
    parser.add_argument("--span-min", type=int, default=5, help="a divisor of 60")
    parser.add_argument("--profile", help="write a cProfile of the pass here")
    args = parser.parse_args()
    os.environ["FLEETWATCH_RAW_PACK_MINUTES"] = str(args.span_min)
    width = args.span_min * 60
    with (
        tempfile.TemporaryDirectory(prefix="fw-bench-pack-") as tmp,
        bench_database(Path(tmp)) as bench,
    ):
        creds = setup_inventory(bench, args.gpus)[: args.gpus // GPUS_PER_NODE]
        sources = [c["source"] for c in creds]
        start = (int(time.time()) - 2 * 3600) // width * width
        t0 = time.monotonic()
        stored = store_span(sources, start, width)
        print(f"stored {stored:,} GPU samples in {time.monotonic() - t0:.0f} s", flush=True)

        from django.db import connection

        from fleet.storage.packed import pack_span, sealed_spans

        with connection.cursor() as cur:
            cur.execute(
                "INSERT INTO fw_rollup_state (tier, kind, done_until, sealed_until)"
                " VALUES ('1m', 'gpu', %s, %s) ON CONFLICT (tier, kind)"
                " DO UPDATE SET done_until = excluded.done_until",
                [start + width, start + width],
            )
            cur.execute("SELECT pg_backend_pid()")
            backend = cur.fetchone()[0]
        spans = sealed_spans("gpu")
        if len(spans) != 1:
            raise SystemExit(f"expected the one span stored, found {spans}")
        profiler = cProfile.Profile(time.process_time) if args.profile else None
        cpu0, pg0, wall0 = time.process_time(), backend_cpu_s(backend), time.monotonic()
        if profiler:
            profiler.enable()
        written = pack_span("gpu", spans[0])
        if profiler:
            profiler.disable()
            profiler.dump_stats(args.profile)
        cpu1, pg1, wall1 = time.process_time(), backend_cpu_s(backend), time.monotonic()
        if written != len(sources) * GPUS_PER_NODE:
            raise SystemExit(f"packed {written} rows, expected one per GPU")
        worker_s, pg_s = cpu1 - cpu0, pg1 - pg0
        print(
            f"pass: {written:,} packed rows in {wall1 - wall0:.2f} s wall;"
            f" worker {worker_s:.2f} s CPU, backend {pg_s:.2f} s"
        )
        print(
            f"gpus={written} span_min={args.span_min}"
            f" worker_us_per_gpu_sample={worker_s / stored * 1e6:.2f}"
            f" pg_us_per_gpu_sample={pg_s / stored * 1e6:.2f} pass_s={wall1 - wall0:.2f}"
        )
        connection.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
