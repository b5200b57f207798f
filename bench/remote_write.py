"""Remote write's cost on one core (issue 23, part 4): `.venv/bin/python bench/remote_write.py
[--gpus 1000] [--seconds 30] [--batches 2000,5000,10000,20000]`.

The same GPU rows the shipper reads (15 fields per GPU row, the H200 capture replayed per GPU
as bench/peer.py does: bench/peer_stream.py), N GPUs for S seconds, in the shipper's (ts,
entity) order. Two measures per batch size (samples per request):

1. encode: the shipper's own request building (fleet/remote_write/ship.py `split_requests`,
   `request_body`: grouping into series, hand-encoded WriteRequest, snappy block) — CPU seconds of
   this process per sample, samples per second of one core, and bytes per sample on the wire
   (compressed) and before compression.
2. ship: the same, POSTed to a local Prometheus (Debian's /usr/bin/prometheus with
   `--web.enable-remote-write-receiver`), one request after another as a pass sends them —
   wall-clock samples per second, this process's CPU per sample, and Prometheus's CPU per
   sample (its /proc stat). Each batch size ships its own later stretch of time (a
   Prometheus refuses samples older than a series' newest).

3. pass (`--pass-db sqlite|postgres`): a whole shipper pass (`ship_pass`) over the same rows
   stored through the one write path into a fresh migrated database and rolled up: the
   database read included — this process's CPU per sample (SQLite reads in it), on
   PostgreSQL also its backend's (same host), and samples per second wall.

Last line: `gpus=N batch=B encode_samples_per_s=X ship_samples_per_s=X
bytes_per_sample=X` for the largest batch.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.environment import use_bench_settings  # noqa: E402

use_bench_settings()
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fleetwatch.settings")

import cramjam  # noqa: E402
import django  # noqa: E402

django.setup()

from django.db import connections  # noqa: E402

from agents.protocol.metrics import METRICS  # noqa: E402
from bench.peer_stream import FIELDS, Stream  # noqa: E402
from fleet.models import GPU, Hall, Node, Rack, Site  # noqa: E402
from fleet.remote_write import client  # noqa: E402
from fleet.remote_write.rows import RawRow  # noqa: E402
from fleet.remote_write.series import EntityLabels  # noqa: E402
from fleet.remote_write.ship import request_body, ship_pass, split_requests  # noqa: E402
from fleet.storage.db import open_db  # noqa: E402
from fleet.storage.latest import LatestDelta  # noqa: E402
from fleet.storage.rollups import rollup_all  # noqa: E402
from fleet.storage.samples import SampleWrite, write_samples  # noqa: E402
from fleetwatch.env import database_from_url, sqlite_database  # noqa: E402
from fleetwatch.remote_write_settings import RemoteWrite  # noqa: E402
from tests.support.remote_write import Receiver  # noqa: E402
from tests.support.server import SQLITE_FILE as DB_FILE  # noqa: E402

GPUS_PER_NODE = 8


def labels(gpus: int) -> EntityLabels:
    """Inventory labels as `series.entity_labels` gives them: 8 GPUs a node, 4 nodes a rack."""
    out: EntityLabels = {}
    for g in range(gpus):
        node, index = divmod(g, GPUS_PER_NODE)
        out[(node, index)] = (
            ("site", "bench"),
            ("rack", f"R{node // 4:03d}"),
            ("node", f"gpu-node-{node:05d}"),
            ("gpu", str(index)),
            ("uuid", f"GPU-{g:08x}-5b1c-4f43-9d1e-3c2e0d7a{g % 65536:04x}"),
        )
    return out


def rows(stream: Stream, gpus: int, start: int, seconds: int) -> list[RawRow]:
    """Raw GPU rows in (ts, node, gpu) order with the 15 fields set, the rest NULL."""
    names = [m.name for m in METRICS["gpu"]]
    where = {f.metric: names.index(f.metric) for f in FIELDS}
    out = []
    for t in range(start, start + seconds):
        for g in range(gpus):
            values: list[float | int | None] = [None] * len(names)
            for metric, value in stream.fleetwatch(g, t).items():
                values[where[metric]] = value
            out.append(RawRow(float(t), divmod(g, GPUS_PER_NODE), tuple(values)))
    return out


def bodies(batch: list[RawRow], per_request: int, known: EntityLabels) -> list[tuple[bytes, int]]:
    encoded: dict[tuple[tuple[int, ...], int], bytes] = {}
    out = []
    for chunk, _ in split_requests(batch, per_request):
        body, sent, _ = request_body("gpu", chunk, known, encoded)
        out.append((body, sent))
    return out


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--batches", default="2000,5000,10000,20000")
    parser.add_argument("--pass-db", choices=("sqlite", "postgres"), default=None)
    args = parser.parse_args()
    sizes = [int(b) for b in args.batches.split(",")]
    known = labels(args.gpus)
    origin = int(time.time()) - 3600
    stream = Stream(origin)
    print(f"{args.gpus} GPUs x {args.seconds} s x {len(FIELDS)} fields per batch size")
    with tempfile.TemporaryDirectory() as tmp:
        prom = Receiver(Path(tmp) / "prometheus")
        assert prom.proc is not None
        config_of = {b: RemoteWrite(url=prom.write_url, batch_samples=b) for b in sizes}
        try:
            line = ""
            for k, size in enumerate(sizes):
                batch = rows(stream, args.gpus, origin + k * args.seconds, args.seconds)
                cpu = time.process_time()
                built = bodies(batch, size, known)
                encode_s = time.process_time() - cpu
                samples = sum(n for _, n in built)
                wire = sum(len(b) for b, _ in built)
                raw = sum(len(b) for b in _uncompressed(batch, size, known))
                prom_cpu, cpu, wall = (
                    cpu_seconds(prom.proc.pid),
                    time.process_time(),
                    time.monotonic(),
                )
                for body, _ in bodies(batch, size, known):
                    answer = client.post(config_of[size], body)
                    if answer.outcome is not client.Outcome.STORED:
                        raise SystemExit(f"Prometheus answered {answer.status}: {answer.detail}")
                wall = time.monotonic() - wall
                ship_cpu = time.process_time() - cpu
                prom_cpu = cpu_seconds(prom.proc.pid) - prom_cpu
                print(
                    f"batch {size:>6}: {len(built):>4} requests;"
                    f" encode {encode_s / samples * 1e6:.2f} us/sample"
                    f" ({samples / encode_s:,.0f} samples/s on one core);"
                    f" wire {wire / samples:.2f} B/sample ({raw / samples:.2f} before snappy);"
                    f" ship {samples / wall:,.0f} samples/s wall,"
                    f" sender {ship_cpu / samples * 1e6:.2f} us/sample,"
                    f" prometheus {prom_cpu / samples * 1e6:.2f} us/sample"
                )
                line = (
                    f"gpus={args.gpus} batch={size} encode_samples_per_s={samples / encode_s:.0f}"
                    f" ship_samples_per_s={samples / wall:.0f}"
                    f" bytes_per_sample={wire / samples:.2f}"
                )
            if args.pass_db:
                start = origin + len(sizes) * args.seconds
                with pass_database(args.pass_db, Path(tmp)) as alias:
                    whole_pass(alias, stream, args.gpus, start, args.seconds, prom)
            print(line)
        finally:
            prom.stop()
    return 0


@contextlib.contextmanager
def pass_database(engine: str, tmp: Path) -> Iterator[str]:
    """A fresh migrated database as a connection alias: a SQLite file, or a PostgreSQL
    database of the services tier (dropped afterwards)."""
    from tests.support import services
    from tests.support.databases import _migrate, register_alias

    alias, name = "remote_write_bench", f"fwbench_{uuid.uuid4().hex[:10]}"
    admin = services.services_database_url()
    if engine == "sqlite":
        var = tmp / "var"
        _migrate(var, None)
        register_alias(alias, sqlite_database(str(var / DB_FILE)))
    else:
        url = services.create_database(admin, name)
        _migrate(tmp / "var", url)
        register_alias(alias, database_from_url(url))
    try:
        yield alias
    finally:
        connections[alias].close()
        if engine != "sqlite":
            services.drop_database(admin, name)


def whole_pass(
    alias: str, stream: Stream, gpus: int, start: int, seconds: int, prom: Receiver
) -> None:
    """The rows stored through the write path, rolled up, then one shipper pass timed."""
    site = Site.objects.using(alias).create(slug="bench", name="Bench")
    hall = Hall.objects.using(alias).create(site=site, name="H1")
    nodes: dict[int, int] = {}
    for n in range(math.ceil(gpus / GPUS_PER_NODE)):
        if n % 4 == 0:
            rack = Rack.objects.using(alias).create(
                hall=hall, name=f"R{n // 4:03d}", power_budget_kw=60
            )
        nodes[n] = Node.objects.using(alias).create(name=f"gpu-node-{n:05d}", rack=rack).pk
    GPU.objects.using(alias).bulk_create(
        GPU(node_id=nodes[g // GPUS_PER_NODE], index=g % GPUS_PER_NODE, uuid=f"GPU-{g:08x}")
        for g in range(gpus)
    )
    storage = open_db(dict(connections.settings[alias]))
    try:
        for t in range(start, start + seconds):
            write = SampleWrite()
            write.add_samples(
                "gpu",
                [
                    (
                        (nodes[g // GPUS_PER_NODE], g % GPUS_PER_NODE),
                        {"ts": float(t)} | stream.fleetwatch(g, t),
                    )
                    for g in range(gpus)
                ],
            )
            write_samples(storage, write, LatestDelta())
    finally:
        storage.close()
    rollup_all(start + seconds + 70, using=alias)
    config = RemoteWrite(url=prom.write_url)
    assert prom.proc is not None
    backend = _backend_pid(alias)
    backend_cpu = cpu_seconds(backend) if backend else 0.0
    prom_cpu, cpu, wall = cpu_seconds(prom.proc.pid), time.process_time(), time.monotonic()
    result = ship_pass(start + seconds + 70, config, using=alias, budget_s=3600)
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    prom_cpu = cpu_seconds(prom.proc.pid) - prom_cpu
    backend_cpu = cpu_seconds(backend) - backend_cpu if backend else 0.0
    samples = sum(result.shipped.values())
    if result.failed or samples != gpus * seconds * len(FIELDS):
        raise SystemExit(f"pass shipped {samples} samples: {result}")
    print(
        f"pass ({connections[alias].vendor}, batch {config.batch_samples}): {samples:,} samples"
        f" in {result.requests} requests, {samples / wall:,.0f} samples/s wall;"
        f" this process {cpu / samples * 1e6:.2f} us/sample (database read included),"
        f" its PostgreSQL backend {backend_cpu / samples * 1e6:.2f} us/sample,"
        f" prometheus {prom_cpu / samples * 1e6:.2f} us/sample"
    )


def _backend_pid(alias: str) -> int | None:
    """PostgreSQL: the pid of this connection's server process (same host), else None."""
    if connections[alias].vendor != "postgresql":
        return None
    with connections[alias].cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return int(cur.fetchone()[0])


def _uncompressed(batch: list[RawRow], per_request: int, known: EntityLabels) -> list[bytes]:
    return [bytes(cramjam.snappy.decompress_raw(b)) for b, _ in bodies(batch, per_request, known)]


if __name__ == "__main__":
    raise SystemExit(main())
