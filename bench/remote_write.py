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

The database read of a pass is not in these numbers (it is the raw table's ordered range
read). Last line: `gpus=N batch=B encode_samples_per_s=X ship_samples_per_s=X
bytes_per_sample=X` for the largest batch.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.environment import use_bench_settings  # noqa: E402

use_bench_settings()
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fleetwatch.settings")

import cramjam  # noqa: E402
import django  # noqa: E402

django.setup()

from agents.protocol.metrics import METRICS  # noqa: E402
from bench.peer_stream import FIELDS, Stream  # noqa: E402
from fleet.remote_write import client  # noqa: E402
from fleet.remote_write.rows import RawRow  # noqa: E402
from fleet.remote_write.series import EntityLabels  # noqa: E402
from fleet.remote_write.ship import request_body, split_requests  # noqa: E402
from fleetwatch.remote_write_settings import RemoteWrite  # noqa: E402
from tests.support.remote_write import Receiver  # noqa: E402

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
            print(line)
        finally:
            prom.stop()
    return 0


def _uncompressed(batch: list[RawRow], per_request: int, known: EntityLabels) -> list[bytes]:
    return [bytes(cramjam.snappy.decompress_raw(b)) for b, _ in bodies(batch, per_request, known)]


if __name__ == "__main__":
    raise SystemExit(main())
