"""bench/peer.py's fairness, without running it: both sides are given the same readings,
the replay is a plausible fleet (counters rise, GPUs not in lock-step), and the disk
accounting of Prometheus's data directory counts what it keeps."""

from __future__ import annotations

import json
import time
from pathlib import Path

import orjson

from agents.protocol.validate import validate_batch
from bench.peer_agents import TraceBatches
from bench.peer_exporter import Pages
from bench.peer_prom import data_dir_bytes
from bench.peer_stream import FIELDS, Stream
from fleet.ingest.prometheus.mapping import BY_FIELD

ORIGIN = 1_790_000_000


def exporter_readings(page: bytes) -> dict[tuple[int, str], float]:
    """(GPU index, Fleetwatch metric) → value, from dcgm-exporter text, converted with the
    pull's own mapping (as Fleetwatch reads a dcgm-exporter)."""
    out: dict[tuple[int, str], float] = {}
    for line in page.decode().splitlines():
        if line.startswith("#"):
            continue
        name_labels, value = line.rsplit(" ", 1)
        name, labels = name_labels.split("{", 1)
        gpu = int(labels.split('gpu="', 1)[1].split('"', 1)[0])
        field = BY_FIELD[name]
        out[(gpu, field.metric)] = float(value) * field.scale
    return out


def test_the_exporter_and_the_agents_carry_the_same_readings_every_second() -> None:
    stream = Stream(ORIGIN)
    pages, batches = Pages(stream, 3), TraceBatches(stream, ["node:a", "node:b", "node:c"])
    for second in (ORIGIN, ORIGIN + 41, ORIGIN + 5 * stream.period + 7):
        served = exporter_readings(pages.page(2, second))
        sent = orjson.loads(batches.render("node:c", 1, second + 0.25, 0))
        carried = {(s["gpu"], m): s[m] for s in sent["gpu"] for m in s if m not in ("ts", "gpu")}
        assert carried.keys() == served.keys()
        assert len(carried) == 8 * len(FIELDS)
        for key, value in carried.items():
            assert value == served[key] or abs(value - served[key]) <= 1e-9 * abs(value), key


def test_a_replayed_batch_is_one_the_ingest_accepts_after_many_loops() -> None:
    now = time.time()
    period = Stream(0).period
    for loops in (0, 1, 1000):  # a long run: counters far past the capture's own values
        stream = Stream(int(now) - loops * period)
        body = orjson.loads(TraceBatches(stream, ["node:a"]).render("node:a", 1, now, 0))
        assert len(validate_batch(body, now).samples["gpu"]) == 8


def test_counters_never_fall_across_the_loop_and_gpus_are_not_in_step() -> None:
    stream = Stream(ORIGIN)
    counters = [i for i, f in enumerate(FIELDS) if f.counter]
    energy = next(i for i, f in enumerate(FIELDS) if f.metric == "energy_j")
    for gpu in range(4):
        previous = stream.dcgm(gpu, ORIGIN)
        for second in range(ORIGIN + 1, ORIGIN + 3 * stream.period):
            now = stream.dcgm(gpu, second)
            assert all(now[i] >= previous[i] for i in counters), (gpu, second)
            assert now[energy] > previous[energy]  # a GPU always draws power
            previous = now
    power = next(i for i, f in enumerate(FIELDS) if f.metric == "power_w")
    at_once = {stream.dcgm(gpu, ORIGIN + 20)[power] for gpu in range(8)}
    assert len(at_once) > 4  # a node's GPUs are at different points of the capture


def test_prometheus_disk_counts_blocks_wal_and_head_chunks_and_the_blocks_span(
    tmp_path: Path,
) -> None:
    block = tmp_path / "01HBLOCK"
    (block / "chunks").mkdir(parents=True)
    (block / "chunks" / "000001").write_bytes(b"x" * 1000)
    (block / "index").write_bytes(b"x" * 200)
    (block / "meta.json").write_text(json.dumps({"minTime": 0, "maxTime": 300_000}))
    meta = len((block / "meta.json").read_bytes())
    (tmp_path / "wal").mkdir()
    (tmp_path / "wal" / "00000003").write_bytes(b"x" * 500)
    (tmp_path / "chunks_head").mkdir()
    (tmp_path / "chunks_head" / "000001").write_bytes(b"x" * 70)
    (tmp_path / "queries.active").write_bytes(b"\0" * 20001)
    parts, block_hours = data_dir_bytes(tmp_path)
    assert parts == {"blocks": 1200 + meta, "wal": 500, "chunks_head": 70, "other": 20001}
    assert block_hours == 300 / 3600
