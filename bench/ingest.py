"""Ingest benchmark: `.venv/bin/python bench/ingest.py [--db sqlite|postgres]`.

In one run on this machine, against one real server (uvicorn + ingest writer
process) and one load-generator process (C WebSocket connections, one per node,
W batches in flight each, 8 GPUs × 20 fields per batch):
  (a) the full ingest path: receive, validate, durable write, ack;
  (b) a no-op consumer with the same consumer machinery that parses and acks;
  (c) a stock Channels AsyncWebsocketConsumer that parses and acks;
  (d) the one write path (fleet.storage.samples.write_samples) of the same rows next to a raw
      executemany of them.
Prints a table and, last, one `key=value` line. Figures are closed-loop
saturation throughput; the load generator shares the two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.environment import use_bench_settings  # noqa: E402

use_bench_settings()

from tests.support.agent import post_json  # noqa: E402
from tests.support.server import FleetServer  # noqa: E402

GPU_PER_BATCH = 8
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process so far (from /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def server_pids(server: FleetServer) -> dict[str, int]:
    assert server.proc is not None
    out = subprocess.run(
        ["pgrep", "-P", str(server.proc.pid)], capture_output=True, text=True, check=False
    )
    pids = {"loop": server.proc.pid}
    for i, pid in enumerate(out.stdout.split()):
        pids[f"writer{i}"] = int(pid)
    return pids


def seed_nodes(server: FleetServer, count: int) -> None:
    """The bench's nodes and their GPUs: ingest stores samples only for GPUs a node's
    inventory has (docs/protocol.md "Unknown GPUs")."""
    script = (
        "from fleet.models import GPU, Node, Rack\n"
        "rack = Rack.objects.get(name='A01')\n"
        f"nodes = [Node(name=f'bench-{{i:04d}}', rack=rack) for i in range({count})]\n"
        "Node.objects.bulk_create(nodes, ignore_conflicts=True)\n"
        "nodes = Node.objects.filter(name__startswith='bench-')\n"
        f"gpus = [GPU(node=n, index=i) for n in nodes for i in range({GPU_PER_BATCH})]\n"
        "GPU.objects.bulk_create(gpus, ignore_conflicts=True)\n"
    )
    server.manage("shell", "-c", script)


def enroll_all(server: FleetServer, count: int, path: Path) -> None:
    creds = []
    for i in range(count):
        source = f"node:bench-{i:04d}"
        status, body = post_json(
            server.url + "/api/v1/enroll", {"enroll_token": server.enroll_token, "source": source}
        )
        assert status == 201, body
        creds.append({"source": source, "token": body["token"]})
    path.write_text(json.dumps(creds))


def load(server: FleetServer, route: str, tokens: Path, args: argparse.Namespace) -> dict[str, Any]:
    pids = server_pids(server)
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.ingest_client",  # a module, so it imports bench.environment
            "--url",
            f"{server.ws_url}/ws/ingest/{route}",
            "--tokens",
            str(tokens),
            "--connections",
            str(args.connections),
            "--inflight",
            str(args.inflight),
            "--warmup",
            str(args.warmup),
            "--window",
            str(args.window),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=args.warmup + args.window + 120,
    )
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    result["gpu_samples_per_s"] = result["acked_in_window"] * GPU_PER_BATCH / args.window
    # CPU per acknowledged batch, whole run (warm-up included), per process.
    total = max(1, result["acked_total"])
    pids = server_pids(server) | pids
    result["cpu_us_per_batch"] = {
        name: round(1e6 * (cpu_seconds(pid) - before.get(name, 0.0)) / total)
        for name, pid in pids.items()
    } | {"client": round(1e6 * result["client_cpu_s"] / total)}
    return result


def storage_rates(server: FleetServer, rows_total: int, commit_rows: int) -> tuple[float, float]:
    """Rows/s of write_samples vs raw executemany of the same rows, same commit size."""
    env = server.env()
    code = f"""
import json, time, os, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "fleetwatch.settings")
django.setup()
from django.conf import settings
from fleet.storage.db import open_db, raw_columns
from fleet.storage.samples import SampleWrite, write_samples
from agents.protocol.metrics import METRICS
db = open_db(dict(settings.DATABASES["default"]))
cols = raw_columns("gpu")
metrics = [m for m in METRICS["gpu"]]
def samples(base):
    out = []
    for i in range({rows_total}):
        s = {{"ts": base + (i // 1600) * 0.001, "gpu": i % 8}}
        for j, m in enumerate(metrics):
            if j % 3:
                s[m.name] = (int if m.integer else float)(j + i % 7)
        out.append(((1 + (i // 8) % 200, i % 8), s))
    return out
def rows(base):
    return [(s["ts"], *key, *(s.get(m.name) for m in metrics)) for key, s in samples(base)]
def timed(fn, data):
    t = time.perf_counter()
    for s in range(0, len(data), {commit_rows}):
        fn(data[s:s + {commit_rows}])
    return len(data) / (time.perf_counter() - t)
def one_path(chunk):
    write = SampleWrite()
    write.add_samples("gpu", chunk)
    write_samples(db, write)
store_rate = timed(one_path, samples(1.2e9))
marks = ",".join(["%s"] * len(cols))
sql = f"INSERT INTO fw_gpu_raw VALUES ({{marks}})"
if db.vendor == "sqlite":
    conn = db.conn
    sql = sql.replace("%s", "?").replace("INSERT", "INSERT OR IGNORE")
    def raw(chunk):
        conn.execute("BEGIN IMMEDIATE"); conn.executemany(sql, chunk); conn.execute("COMMIT")
else:
    conn = db._connection()
    sql += " ON CONFLICT DO NOTHING"
    def raw(chunk):
        with conn.cursor() as cur:
            cur.executemany(sql, chunk)
        conn.commit()
raw_rate = timed(raw, rows(1.3e9))
print(json.dumps([store_rate, raw_rate]))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    store_rate, raw_rate = json.loads(out.stdout.strip().splitlines()[-1])
    return store_rate, raw_rate


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--inflight", type=int, default=4)
    parser.add_argument("--warmup", type=float, default=3)
    parser.add_argument("--window", type=float, default=20)
    parser.add_argument("--storage-rows", type=int, default=160_000)
    args = parser.parse_args()
    tier = "services" if args.db == "postgres" else "embedded"
    with tempfile.TemporaryDirectory(prefix="fw-bench-") as tmp:
        var_dir = Path(tmp)
        with FleetServer.started(
            var_dir,
            tier=tier,
            racks=1,
            # production intervals, not the test fixture's quick ones
            extra_env={
                "FLEETWATCH_BENCH_ROUTES": "1",
                "FLEETWATCH_LIVE_INTERVAL_S": os.environ.get("BENCH_LIVE_S", "0.5"),
                "FLEETWATCH_REVALIDATE_S": "5",
            },
        ) as server:
            seed_nodes(server, args.connections)
            tokens = var_dir / "tokens.json"
            enroll_all(server, args.connections, tokens)
            results = {}
            for name, route in (("noop", "bench-noop"), ("ingest", "v1"), ("stock", "bench-stock")):
                results[name] = load(server, route, tokens, args)
                print(f"  {name:7s} {json.dumps(results[name])}", flush=True)
            time.sleep(1.0)
            stored = server.count("gpu")
            expected = results["ingest"]["acked_total"] * GPU_PER_BATCH
            commit_rows = 800
            store_rate, raw_rate = storage_rates(server, args.storage_rows, commit_rows)
    ingest = results["ingest"]["gpu_samples_per_s"]
    noop = results["noop"]["gpu_samples_per_s"]
    stock = results["stock"]["gpu_samples_per_s"]
    print()
    print(f"machine: {platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"store: {args.db}; C={args.connections} W={args.inflight}; window {args.window:g} s")
    print(f"{'path':40s} {'GPU-samples/s':>14s} {'p50 ms':>8s} {'p99 ms':>8s}  CPU us/batch")
    for label, key in (
        ("(a) full ingest (validate, commit, ack)", "ingest"),
        ("(b) no-op, same consumer machinery", "noop"),
        ("(c) stock AsyncWebsocketConsumer no-op", "stock"),
    ):
        r = results[key]
        cpu = " ".join(f"{k}={v}" for k, v in r["cpu_us_per_batch"].items())
        print(
            f"{label:40s} {r['gpu_samples_per_s']:14,.0f} {r['p50_ms'] or 0:8.1f} "
            f"{r['p99_ms'] or 0:8.1f}  {cpu}"
        )
    print(
        f"(d) storage write, {commit_rows} rows/commit: {store_rate:,.0f} rows/s; "
        f"raw executemany: {raw_rate:,.0f} rows/s"
    )
    print(
        f"correctness: {stored} GPU rows stored for {expected // 8} acked batches "
        f"({'exactly' if stored == expected else 'MISMATCH'} 8 per batch)"
    )
    print(
        f"gpu_samples_per_s={ingest:.0f} noop_gpu_samples_per_s={noop:.0f} "
        f"stock_noop_gpu_samples_per_s={stock:.0f} ratio_vs_noop={ingest / noop:.2f} "
        f"rows_per_s={store_rate:.0f} raw_rows_per_s={raw_rate:.0f} "
        f"ratio_vs_raw={store_rate / raw_rate:.2f}"
    )
    return 0 if stored == expected else 1


if __name__ == "__main__":
    sys.exit(main())
