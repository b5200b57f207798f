"""How to pack sealed raw spans (issue 23, part 3): bytes and CPU per GPU-hour, measured ways.

The value stream is bench/peer.py's (bench/peer_stream.py: the H200 capture at 1 Hz, looped,
each GPU at its own offset; the same 15 fields, the rest of the GPU's columns NULL as the
peer bench's agents leave them). For `--gpus` GPUs over one hour, cut into spans of
`--span-min` minutes, one packed row per GPU and span:

- codec: fleet/storage/packed_codec.py (delta/zigzag of integers and of decimals read back
  bit-exact, XOR of other floats, byte shuffle), its body compressed with zlib (what the
  codec ships) and, where the `zstandard` package is installed, zstd, at a few levels;
  bytes are the blobs' lengths, CPU µs are this process's to pack and to unpack
  (time.process_time), per GPU-hour;
- PostgreSQL: one row per GPU and span, a `float8[]`/`int8[]` per column (`array_agg`
  from a raw table), TOAST compression `lz4` and `pglz`; the same rows with the codec's
  blob in a `bytea` column with STORAGE EXTERNAL (what fleet migration 0031 makes); bytes are
  pg_total_relation_size (heap, TOAST, indexes), CPU is the statement's wall time on an
  otherwise idle server (packing: the INSERT … SELECT array_agg; unpacking: a scan that
  unnests every array). And the raw table itself, for reference.

    .venv/bin/python bench/packing.py [--gpus 100] [--span-min 5] [--dsn postgresql://…]

Creates and drops its own database (fleetwatch_bench_packing).
"""

from __future__ import annotations

import argparse
import importlib
import io
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.protocol.metrics import GPU_METRICS
from bench.peer_stream import FIELDS, Stream
from fleet.storage import packed_codec

HOUR_S = 3600
ORIGIN = 1_764_979_200  # 2025-12-06 00:00 UTC: a span-aligned hour
DB = "fleetwatch_bench_packing"

Columns = list[list[float | int | None]]


def spans(stream: Stream, gpus: int, span_s: int) -> list[Columns]:
    """Every GPU's hour as spans: [ts, then each GPU metric column] (NULL where the peer
    stream carries no such field)."""
    carried = {f.metric for f in FIELDS}
    out: list[Columns] = []
    for gpu in range(gpus):
        for lo in range(ORIGIN, ORIGIN + HOUR_S, span_s):
            seconds = range(lo, lo + span_s)
            samples = [stream.fleetwatch(gpu, s) for s in seconds]
            columns: Columns = [[float(s) for s in seconds]]
            for m in GPU_METRICS:
                if m.name in carried:
                    columns.append([sample[m.name] for sample in samples])
                else:
                    columns.append([None] * span_s)
            out.append(columns)
    return out


INTEGERS = [False, *(m.integer for m in GPU_METRICS)]


def measure_codec(data: list[Columns], gpu_hours: float) -> None:
    started = time.process_time()
    bodies = [packed_codec.encode_body(cols, INTEGERS) for cols in data]
    body_s = time.process_time() - started
    raw_len = sum(len(b) for b in bodies)
    print(
        f"codec body (uncompressed): {raw_len / gpu_hours / 1000:.1f} kB/GPU-hour,"
        f" {body_s / gpu_hours * 1e6:.0f} µs/GPU-hour to build"
    )
    compressors: dict[str, Callable[[bytes], bytes]] = {
        f"zlib-{level}": _zlib(level) for level in (1, 6, 9)
    }
    try:  # zstd is measured where the `zstandard` package is installed (not a dependency)
        zstandard = importlib.import_module("zstandard")
        for level in (1, 3, 9, 19):
            compressors[f"zstd-{level}"] = zstandard.ZstdCompressor(level=level).compress
    except ImportError:
        print("  (zstandard not installed: zstd not measured)")
    for name, compress in compressors.items():
        started = time.process_time()
        size = sum(len(compress(b)) for b in bodies)
        took = time.process_time() - started + body_s
        print(
            f"  {name:8} {size / gpu_hours / 1000:8.2f} kB/GPU-hour,"
            f" pack {took / gpu_hours * 1e6:8.0f} µs/GPU-hour"
        )
    started = time.process_time()
    blobs = [packed_codec.pack(cols, INTEGERS) for cols in data]
    pack_s = time.process_time() - started
    started = time.process_time()
    back = [packed_codec.unpack(b, INTEGERS) for b in blobs]
    unpack_s = time.process_time() - started
    if back != data:
        raise SystemExit("codec round trip differs")
    size = sum(len(b) for b in blobs)
    print(
        f"codec as shipped (zlib-{packed_codec.ZLIB_LEVEL}): {size / gpu_hours / 1000:.2f}"
        f" kB/GPU-hour; pack {pack_s / gpu_hours * 1e6:.0f} µs/GPU-hour, unpack"
        f" {unpack_s / gpu_hours * 1e6:.0f} µs/GPU-hour; round trip exact"
    )


def _zlib(level: int) -> Callable[[bytes], bytes]:
    return lambda body: zlib.compress(body, level)


def measure_postgres(dsn: str, data: list[Columns], span_s: int, gpu_hours: float) -> None:
    admin = psycopg.connect(dsn, autocommit=True)
    admin.execute(f"DROP DATABASE IF EXISTS {DB}")
    admin.execute(f"CREATE DATABASE {DB}")
    try:
        with psycopg.connect(dsn.rsplit("/", 1)[0] + f"/{DB}", autocommit=True) as conn:
            _postgres(conn, data, span_s, gpu_hours)
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {DB}")
        admin.close()


def _postgres(conn: psycopg.Connection, data: list[Columns], span_s: int, gh: float) -> None:
    names = ["ts", *(m.name for m in GPU_METRICS)]
    types = ["float8", *("int8" if m.integer else "float8" for m in GPU_METRICS)]
    spans_per_gpu = HOUR_S // span_s
    cols = ", ".join(f"{n} {t}" for n, t in zip(names, types, strict=True))
    conn.execute(
        f"CREATE TABLE raw (node_id int NOT NULL, gpu int NOT NULL, {cols},"
        " PRIMARY KEY (node_id, gpu, ts))"
    )
    buf = io.StringIO()
    for i, span in enumerate(data):
        gpu = i // spans_per_gpu
        for row in zip(*span, strict=True):
            text = "\t".join("\\N" if v is None else repr(v) for v in row)
            buf.write(f"{gpu // 8}\t{gpu % 8}\t{text}\n")
    with conn.cursor().copy(f"COPY raw (node_id, gpu, {', '.join(names)}) FROM STDIN") as cp:
        cp.write(buf.getvalue())
    conn.execute("VACUUM ANALYZE raw")
    print(f"postgres raw rows (reference): {_size(conn, 'raw') / gh / 1000:.1f} kB/GPU-hour")
    for method in ("lz4", "pglz"):
        arrays = ", ".join(
            f"{n} {t}[] COMPRESSION {method}" for n, t in zip(names, types, strict=True)
        )
        table = f"arrays_{method}"
        conn.execute(
            f"CREATE TABLE {table} (node_id int NOT NULL, gpu int NOT NULL,"
            f" span_start bigint NOT NULL, {arrays}, PRIMARY KEY (node_id, gpu, span_start))"
        )
        aggs = ", ".join(f"array_agg({n} ORDER BY ts)" for n in names)
        started = time.perf_counter()
        conn.execute(
            f"INSERT INTO {table} SELECT node_id, gpu, (floor(ts / {span_s}) * {span_s})"
            f"::bigint AS s, {aggs} FROM raw GROUP BY node_id, gpu, s"
        )
        pack_s = time.perf_counter() - started
        started = time.perf_counter()
        unnests = ", ".join(f"unnest({n})" for n in names)
        conn.execute(f"SELECT count(*) FROM (SELECT {unnests} FROM {table}) s").fetchone()
        unpack_s = time.perf_counter() - started
        print(
            f"postgres arrays, TOAST {method}: {_size(conn, table) / gh / 1000:.2f} kB/GPU-hour;"
            f" pack {pack_s / gh * 1e6:.0f} µs/GPU-hour, unpack {unpack_s / gh * 1e6:.0f}"
            " µs/GPU-hour (server wall)"
        )
    conn.execute(
        "CREATE TABLE packed (node_id int NOT NULL, gpu int NOT NULL, span_start"
        " bigint NOT NULL, n int NOT NULL, data bytea NOT NULL,"
        " PRIMARY KEY (node_id, gpu, span_start))"
    )
    conn.execute("ALTER TABLE packed ALTER COLUMN data SET STORAGE EXTERNAL")
    rows = []
    for i, span in enumerate(data):
        gpu = i // spans_per_gpu
        blob = packed_codec.pack(span, INTEGERS)
        rows.append((gpu // 8, gpu % 8, int(span[0][0] or 0), len(span[0]), blob))
    with conn.cursor() as cur:
        cur.executemany("INSERT INTO packed VALUES (%s, %s, %s, %s, %s)", rows)
    conn.execute("VACUUM ANALYZE packed")
    print(
        f"postgres codec rows (bytea, STORAGE EXTERNAL):"
        f" {_size(conn, 'packed') / gh / 1000:.2f} kB/GPU-hour"
    )


def _size(conn: psycopg.Connection, table: str) -> int:
    row = conn.execute("SELECT pg_total_relation_size(%s)", [table]).fetchone()
    return int(row[0]) if row else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, default=100)
    parser.add_argument("--span-min", type=int, default=5)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    if 60 % args.span_min:
        raise SystemExit("--span-min must divide 60")
    span_s = args.span_min * 60
    data = spans(Stream(ORIGIN), args.gpus, span_s)
    gpu_hours = float(args.gpus)
    print(
        f"{args.gpus} GPUs x 1 h, spans of {args.span_min} min, {len(FIELDS)} fields carried"
        f" of {len(GPU_METRICS)} columns"
    )
    measure_codec(data, gpu_hours)
    if not args.no_postgres:
        measure_postgres(args.dsn, data, span_s, gpu_hours)


if __name__ == "__main__":
    main()
