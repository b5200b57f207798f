"""The ingest child's work alone, against PostgreSQL: `.venv/bin/python bench/ingest_round.py
[--gpus 4000] [--ticks 120] [--per-round 4] [--profile FILE]`.

What bench/peer.py's "ingest children" and "postgres backends" groups cost, without the
server, nginx or agents around them, so one change to the write path can be measured in a
minute: a fresh database with bench/rules.py's inventory, one `IngestPipeline` (the child's
logic, fleet/ingest/pipeline.py) on its own connection, fed bench/peer.py's batches (every
node of 8 GPUs once per tick, the H200 trace's 15 fields, bench/peer_agents.py) in rounds of
`--per-round` batches, as the child takes what is readable and commits once. Time is
simulated: tick k is second k, so the latest state is saved every `FLEETWATCH_LATEST_SAVE_S`
of samples, as at 1 Hz. CPU is this process's (the child's share) and the connection's
PostgreSQL backend's, over the GPU samples stored. Last line:

  gpus=N per_round=R child_us_per_gpu_sample=X pg_us_per_gpu_sample=X
"""

from __future__ import annotations

import argparse
import cProfile
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.environment import use_bench_settings  # noqa: E402

use_bench_settings()

from bench.peer_agents import TraceBatches  # noqa: E402
from bench.peer_stream import Stream  # noqa: E402
from bench.scale import bench_database, setup_inventory  # noqa: E402
from bench.scale_agents import GPUS_PER_NODE  # noqa: E402


def backend_cpu_s(pid: int) -> float:
    """utime + stime of a process on this machine, in seconds."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", type=int, default=4000)
    parser.add_argument("--ticks", type=int, default=120, help="simulated seconds")
    parser.add_argument("--per-round", type=int, default=4, help="batches per commit")
    parser.add_argument("--latest-save-s", type=float, default=0.5)
    parser.add_argument("--profile", help="write a cProfile of the timed part here")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="fw-bench-round-") as tmp,
        bench_database(Path(tmp)) as bench,
    ):
        creds = setup_inventory(bench, args.gpus)[: args.gpus // GPUS_PER_NODE]
        from django.conf import settings

        from fleet.ingest.pipeline import IngestPipeline
        from fleet.storage.db import open_db

        db = open_db(dict(settings.DATABASES["default"]))
        pipeline = IngestPipeline(db, save_interval_s=args.latest_save_s, raw_keep_s=7 * 86400)
        from fleet.models import SourceToken

        site_of = dict(SourceToken.objects.values_list("source", "site_id"))
        sources = [c["source"] for c in creds]
        for conn_id, source in enumerate(sources, 1):
            pipeline.hello(conn_id, source, site_of[source])
        start = int(time.time()) - 60
        render = TraceBatches(Stream(start), sources).render
        backend = db.query("SELECT pg_backend_pid()")[0][0]
        rounds = [
            list(range(i, min(i + args.per_round, len(sources))))
            for i in range(0, len(sources), args.per_round)
        ]

        def run(ticks: range) -> int:
            stored = 0
            for tick in ticks:
                ts = start + tick
                for j, members in enumerate(rounds):
                    now = ts + 0.05 + j / len(rounds)
                    frames = [(m + 1, render(sources[m], tick, ts, tick)) for m in members]
                    for result in pipeline.process(frames, now):
                        if result.code != 0:
                            raise SystemExit(f"batch refused: {result}")
                        stored += GPUS_PER_NODE
                    pipeline.flush(now)
            return stored

        run(range(0, 5))  # warm-up: plans, prepared statements, the stage tables
        profiler = cProfile.Profile(time.process_time) if args.profile else None
        cpu0, pg0, wall0 = time.process_time(), backend_cpu_s(backend), time.monotonic()
        if profiler:
            profiler.enable()
        # Render cost is the load generator's: rendered up front would hold GBs, so it is
        # measured alone below and taken off.
        stored = run(range(5, 5 + args.ticks))
        if profiler:
            profiler.disable()
            profiler.dump_stats(args.profile)
        cpu1, pg1, wall1 = time.process_time(), backend_cpu_s(backend), time.monotonic()
        t0 = time.process_time()
        for tick in range(5, 5 + min(args.ticks, 20)):
            for m in range(len(sources)):
                render(sources[m], tick, start + tick, tick)
        render_s = (time.process_time() - t0) / min(args.ticks, 20) * args.ticks
        child_s = cpu1 - cpu0 - render_s
        pg_s = pg1 - pg0
        print(
            f"{stored:,} GPU samples in {wall1 - wall0:.1f} s wall; child {child_s:.2f} s CPU"
            f" (render {render_s:.2f} s taken off), backend {pg_s:.2f} s;"
            f" {len(rounds)} rounds a tick, saves {pipeline.counters.saves}"
        )
        print(
            f"gpus={len(sources) * GPUS_PER_NODE} per_round={args.per_round}"
            f" child_us_per_gpu_sample={child_s / stored * 1e6:.1f}"
            f" pg_us_per_gpu_sample={pg_s / stored * 1e6:.1f}"
        )
        db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
