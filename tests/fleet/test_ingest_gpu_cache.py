"""Which GPUs a node may store comes from the ingest writer's inventory cache: a batch of
known GPUs costs no query, and a node that keeps sending an unknown index costs one small
query per recheck interval, not one per batch (driven through the pipeline directly)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from fleet.ingest import inventory
from fleet.ingest.pipeline import IngestPipeline
from fleet.storage.db import Row, SqliteDb
from tests.support.agent import gpu_batch
from tests.support.server import FleetServer

NODE = "gpu-a01-01"


class CountingDb(SqliteDb):
    """Counts the queries that read GPU rows."""

    gpu_reads = 0

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        if "FROM fleet_gpu" in sql:
            self.gpu_reads += 1
        return super().query(sql, params)


@pytest.fixture(scope="module")
def db_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    server = FleetServer(tmp_path_factory.mktemp("gpu-cache"))
    server.prepare()
    return server.var_dir / "fleetwatch.sqlite3"


@pytest.fixture
def pipeline(db_path: Path) -> Iterator[IngestPipeline]:
    pipeline = IngestPipeline(CountingDb(str(db_path)), save_interval_s=0.0)
    pipeline.hello(1, f"node:{NODE}", 1, "hash")
    yield pipeline
    pipeline.db.close()


def send(pipeline: IngestPipeline, seq: int, gpus: int) -> dict[str, Any] | None:
    batch = gpu_batch(NODE, seq, ts=time.time() - 100 + seq * 0.01, gpus=gpus)
    [result] = pipeline.process([(1, json.dumps(batch).encode())], time.time())
    assert result.code == 0, result
    return result.error


def test_batches_of_known_gpus_read_no_gpu_rows_after_the_first_load(
    pipeline: IngestPipeline,
) -> None:
    assert send(pipeline, 1, 8) is None
    loaded = pipeline.db.gpu_reads  # type: ignore[attr-defined]
    for seq in range(2, 50):
        assert send(pipeline, seq, 8) is None
    assert pipeline.db.gpu_reads == loaded  # type: ignore[attr-defined]


def test_an_unknown_index_is_rechecked_at_most_once_per_interval(
    pipeline: IngestPipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(inventory, "_clock", lambda: clock[0])
    send(pipeline, 100, 8)  # loads the inventory at this clock
    clock[0] += inventory.RELOAD_MIN_S
    before = pipeline.db.gpu_reads  # type: ignore[attr-defined]
    for seq in range(101, 151):  # 50 batches within one interval, each naming GPU 8
        refused = send(pipeline, seq, 9)
        assert refused is not None and refused["field"] == "gpu[8].gpu"
    assert pipeline.db.gpu_reads - before == 1  # type: ignore[attr-defined]
    clock[0] += inventory.RELOAD_MIN_S
    send(pipeline, 151, 9)
    assert pipeline.db.gpu_reads - before == 2  # type: ignore[attr-defined]
