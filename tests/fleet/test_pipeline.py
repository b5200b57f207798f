"""The ingest pipeline's round logic, driven directly over a real SQLite database:
blast radius, failure classification by cause, and per-field latest state."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet.ingest.pipeline import IngestPipeline
from fleet.storage.db import SqliteDb, T, Tx
from fleet.storage.latest import rows_to_latest, select_latest_sql
from tests.support.agent import gpu_batch
from tests.support.server import FleetServer

POISON = 666
NODES = ("gpu-a01-01", "gpu-a01-02", "gpu-a01-03")


class PickyDb(SqliteDb):
    """Refuses a commit holding an event with code 666, as a database refuses a value;
    `fail_with` makes the next commits fail with that exception instead."""

    fail_with: list[BaseException]

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.fail_with = []

    def transaction(self, work: Callable[[Tx], T]) -> T:
        def picky(tx: Tx) -> T:
            if self.fail_with:
                raise self.fail_with.pop(0)
            return work(tx)

        return super().transaction(picky)

    def insert_events(self, rows: list[tuple[Any, ...]]) -> None:
        if any(ev[7] == POISON for ev in rows):
            raise sqlite3.IntegrityError("refused")
        super().insert_events(rows)


@pytest.fixture(scope="module")
def db_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    server = FleetServer(tmp_path_factory.mktemp("pipeline"))
    server.prepare()
    return server.var_dir / "fleetwatch.sqlite3"


def open_pipeline(db_path: Path) -> IngestPipeline:
    pipeline = IngestPipeline(PickyDb(str(db_path)), save_interval_s=0.0)
    for conn_id, node in enumerate(NODES, start=1):
        pipeline.hello(conn_id, f"node:{node}", 1, "hash")
    return pipeline


@pytest.fixture
def pipeline(db_path: Path) -> Iterator[IngestPipeline]:
    pipeline = open_pipeline(db_path)
    yield pipeline
    pipeline.db.close()


def frame(batch: dict[str, Any]) -> bytes:
    return json.dumps(batch).encode()


def node_id(pipeline: IngestPipeline, node: str) -> int:
    return int(pipeline.db.query("SELECT id FROM fleet_node WHERE name = %s", (node,))[0][0])


def count_rows(pipeline: IngestPipeline, node: str, since: float = 0.0) -> int:
    sql = "SELECT count(*) FROM fw_gpu_raw WHERE node_id = %s AND ts >= %s"
    return int(pipeline.db.query(sql, (node_id(pipeline, node), since))[0][0])


def latest_gpu0(pipeline: IngestPipeline, node: str) -> Any:
    records = pipeline.db.query(
        select_latest_sql("gpu", "node_id = %s AND gpu = 0"), (node_id(pipeline, node),)
    )
    return rows_to_latest("gpu", records)[(node_id(pipeline, node), 0)]


def codes(results: list[Any]) -> dict[int, int]:
    return {r.conn_id: r.code for r in results}


def test_a_batch_the_database_refuses_does_not_take_the_round_down(
    pipeline: IngestPipeline,
) -> None:
    ts = time.time() - 50
    poisoned = gpu_batch(NODES[1], 1, ts=ts)
    poisoned["events"] = [{"ts": ts, "kind": "xid", "code": POISON}]
    results = pipeline.process(
        [
            (1, frame(gpu_batch(NODES[0], 1, ts=ts))),
            (2, frame(poisoned)),
            (3, frame(gpu_batch(NODES[2], 1, ts=ts))),
        ],
        time.time(),
    )
    assert codes(results) == {1: 0, 2: 400, 3: 0}
    assert count_rows(pipeline, NODES[0], ts) == 8 and count_rows(pipeline, NODES[2], ts) == 8
    assert count_rows(pipeline, NODES[1], ts) == 0


def test_a_batch_the_database_refuses_for_good_is_answered_400_even_alone(
    pipeline: IngestPipeline,
) -> None:
    ts = time.time() - 45
    poisoned = gpu_batch(NODES[1], 2, ts=ts)
    poisoned["events"] = [{"ts": ts, "kind": "xid", "code": POISON}]
    for _ in range(2):  # the agent would drop it after the first; a resend is refused alike
        [result] = pipeline.process([(2, frame(poisoned))], time.time())
        assert result.code == 400 and result.seq == 2
        assert "database refused" in result.error["reason"]  # type: ignore[index]


@pytest.mark.parametrize(
    "failure",
    [sqlite3.OperationalError("database is locked"), sqlite3.OperationalError("disk I/O error")],
)
def test_a_transient_database_failure_is_answered_503_never_400(
    pipeline: IngestPipeline, failure: BaseException
) -> None:
    ts = time.time() - 40
    batches = [(1, frame(gpu_batch(NODES[0], 3, ts=ts))), (3, frame(gpu_batch(NODES[2], 3, ts=ts)))]
    pipeline.db.fail_with = [failure]  # type: ignore[attr-defined]
    assert set(codes(pipeline.process(batches, time.time())).values()) == {503}
    # and once the database answers again, the resend is stored
    assert set(codes(pipeline.process(batches, time.time())).values()) == {0}


def test_a_lock_time_out_during_the_one_by_one_retry_is_answered_503(
    pipeline: IngestPipeline,
) -> None:
    ts = time.time() - 38
    poisoned = gpu_batch(NODES[1], 4, ts=ts)
    poisoned["events"] = [{"ts": ts, "kind": "xid", "code": POISON}]
    good = frame(gpu_batch(NODES[0], 4, ts=ts))
    # the round is refused (poison), then the database locks up during the retry
    pipeline.db.fail_with = [  # type: ignore[attr-defined]
        sqlite3.IntegrityError("refused"),
        sqlite3.OperationalError("database is locked"),
    ]
    result = codes(pipeline.process([(1, good), (2, frame(poisoned))], time.time()))
    assert result == {1: 503, 2: 503}


def test_a_real_write_lock_held_too_long_makes_the_round_retryable(
    pipeline: IngestPipeline, db_path: Path
) -> None:
    pipeline.db.conn.execute("PRAGMA busy_timeout=200")  # type: ignore[attr-defined]
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        [result] = pipeline.process([(1, frame(gpu_batch(NODES[0], 5)))], time.time())
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.code == 503


@pytest.mark.parametrize(
    ("name", "spoil"),
    [
        ("a seq beyond 64 bits", lambda b: b.update(seq=2**63)),
        ("an info block 300 levels deep", lambda b: b.update(node_info=_deep(300))),
        (
            "an event whose kind is a list",
            lambda b: b.update(events=[{"ts": b["gpu"][0]["ts"], "kind": ["xid"]}]),
        ),
        ("gpu info 300 levels deep", lambda b: b.update(gpu_info=[{"gpu": 0, "x": _deep(300)}])),
        ("agent stats 300 levels deep", lambda b: b.update(agent=_deep(300))),
    ],
)
def test_a_hostile_batch_between_good_ones_is_refused_alone_and_later_saves_still_work(
    pipeline: IngestPipeline, name: str, spoil: Callable[[dict[str, Any]], None]
) -> None:
    now = time.time()
    bad = gpu_batch(NODES[1], 10, ts=now - 2)
    spoil(bad)
    results = pipeline.process(
        [
            (1, frame(gpu_batch(NODES[0], 10, ts=now - 2, temp_gpu_c=61))),
            (2, frame(bad)),
            (3, frame(gpu_batch(NODES[2], 10, ts=now - 2))),
        ],
        now,
    )
    assert codes(results) == {1: 0, 2: 400, 3: 0}, name
    # the next round's latest-state save and source bookkeeping still succeed
    pipeline.process([(1, frame(gpu_batch(NODES[0], 11, ts=now - 1, temp_gpu_c=62)))], now)
    pipeline.flush(now + 1)
    assert pipeline.counters.save_failures == 0
    assert latest_gpu0(pipeline, NODES[0]).values["temp_gpu_c"] == 62
    seen = pipeline.db.query(
        "SELECT last_seq FROM fleet_sourcetoken WHERE source = %s", (f"node:{NODES[0]}",)
    )
    assert all(row[0] in (None, 11) for row in seen)


def _deep(levels: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for _ in range(levels):
        out = {"x": out}
    return out


def test_two_writers_never_move_a_field_back_in_time(db_path: Path) -> None:
    """A node reconnects from one writer to another: the old writer's slow field (from
    an older sample) must not overwrite the newer one, and each field keeps its age."""
    first, second = open_pipeline(db_path), open_pipeline(db_path)
    node = NODES[0]
    t0 = time.time() + 60  # newer than what other tests stored for this node
    # writer 1 gets a sample carrying the slow ECC counter at t0
    old = gpu_batch(node, 20, ts=t0, ecc_dbe_vol_total=5, energy_j=1_007_350.0)
    # writer 2 gets the newer samples: ECC has moved on, energy is not in them at all
    new = gpu_batch(node, 21, ts=t0 + 10, ecc_dbe_vol_total=7, temp_gpu_c=70)
    second.process([(1, frame(new))], t0 + 10)
    second.flush(t0 + 11)
    first.process([(1, frame(old))], t0 + 1)
    first.flush(t0 + 12)  # the stale writer saves last
    row = latest_gpu0(second, node)
    assert row.values["ecc_dbe_vol_total"] == 7 and row.ts["ecc_dbe_vol_total"] == t0 + 10
    assert row.values["temp_gpu_c"] == 70
    assert row.values["energy_j"] == 1_007_350.0 and row.ts["energy_j"] == t0  # its own age
    first.db.close()
    second.db.close()


def test_a_field_that_stopped_arriving_keeps_its_value_and_its_age(
    pipeline: IngestPipeline,
) -> None:
    node = NODES[2]
    t0 = time.time() + 100  # newer than what other tests stored for this node
    pipeline.process([(3, frame(gpu_batch(node, 30, ts=t0, power_instant_w=500.0)))], t0)
    for i in range(1, 4):
        pipeline.process([(3, frame(gpu_batch(node, 30 + i, ts=t0 + i)))], t0 + i)
    pipeline.flush(t0 + 5)
    row = latest_gpu0(pipeline, node)
    assert row.values["power_instant_w"] == 500.0 and row.ts["power_instant_w"] == t0
    assert row.ts["temp_gpu_c"] == t0 + 3 and row.newest == t0 + 3


def test_a_save_mixing_shapes_leaves_each_gpu_the_fields_it_did_not_carry(
    pipeline: IngestPipeline,
) -> None:
    """One save merges GPUs carrying different fields with one statement (one lock order):
    a field a GPU did not carry is bound as nothing and must keep its stored value."""
    node = NODES[2]
    t0 = time.time() + 120  # newer than what other tests stored for this node
    pipeline.process([(3, frame(gpu_batch(node, 70, ts=t0, power_instant_w=500.0)))], t0)
    pipeline.flush(t0)
    mixed = gpu_batch(node, 71, ts=t0 + 1, temp_gpu_c=71)
    mixed["gpu"][0]["power_instant_w"] = 321.0  # GPU 0 alone carries it this time
    pipeline.process([(3, frame(mixed))], t0 + 1)
    pipeline.flush(t0 + 2)
    nid = node_id(pipeline, node)
    records = pipeline.db.query(select_latest_sql("gpu", "node_id = %s AND gpu < 2"), (nid,))
    latest = rows_to_latest("gpu", records)
    gpu0, gpu1 = latest[(nid, 0)], latest[(nid, 1)]
    assert (gpu0.values["power_instant_w"], gpu0.ts["power_instant_w"]) == (321.0, t0 + 1)
    assert (gpu1.values["power_instant_w"], gpu1.ts["power_instant_w"]) == (500.0, t0)
    assert gpu1.values["temp_gpu_c"] == 71 and gpu1.ts["temp_gpu_c"] == t0 + 1


def test_a_node_clock_running_ahead_does_not_freeze_its_latest_state(
    pipeline: IngestPipeline,
) -> None:
    now = time.time()
    ahead = gpu_batch(NODES[1], 40, ts=now + 200, temp_gpu_c=50)
    on_time = gpu_batch(NODES[1], 41, ts=now + 1, temp_gpu_c=70)
    pipeline.process([(2, frame(ahead))], now)
    pipeline.process([(2, frame(on_time))], now + 1)
    pipeline.flush(now + 2)
    assert latest_gpu0(pipeline, NODES[1]).values["temp_gpu_c"] == 70


def test_gpu_limits_are_upserted_even_when_another_writer_created_the_row(
    pipeline: IngestPipeline,
) -> None:
    nid = node_id(pipeline, NODES[0])
    batch = gpu_batch(NODES[0], 50, ts=time.time() - 30)
    batch["gpu_info"] = [{"gpu": 0, "uuid": "GPU-stale", "limits": {"slowdown_c": 88}}]
    [result] = pipeline.process([(1, frame(batch))], time.time())
    assert result.code == 0
    stored = pipeline.db.query(
        'SELECT uuid, reported_slowdown_c FROM fleet_gpu WHERE node_id = %s AND "index" = 0', (nid,)
    )
    assert stored == [("GPU-stale", 88.0)]


def test_the_pipeline_holds_only_what_changed_since_its_last_save(
    pipeline: IngestPipeline,
) -> None:
    now = time.time()
    pipeline.save_interval_s = 3600.0
    pipeline.saved_at = now
    pipeline.process([(1, frame(gpu_batch(NODES[0], 60, ts=now - 1)))], now)
    assert len(pipeline.pending) == 8  # one node's GPUs, not the fleet
    pipeline.save_interval_s = 0.0
    pipeline.flush(now + 1)
    assert len(pipeline.pending) == 0
    assert pipeline.take_changed()["gpu"]


def gpu_info_batch(node: str, seq: int, indexes: range) -> dict[str, Any]:
    info = [{"gpu": i, "model": "NVIDIA H200"} for i in indexes]
    return {"protocol": 1, "source": f"node:{node}", "seq": seq, "gpu_info": info}


def test_batches_of_one_round_cannot_together_pass_the_gpu_limit(
    pipeline: IngestPipeline,
) -> None:
    """Each batch alone fits under MAX_GPUS_PER_NODE; together in one round they would
    not: the first is taken and the second refused, and the node stays within the bound."""
    from agents.protocol import MAX_GPUS_PER_NODE

    node = NODES[2]
    node_pk = node_id(pipeline, node)
    known = int(
        pipeline.db.query("SELECT count(*) FROM fleet_gpu WHERE node_id = %s", (node_pk,))[0][0]
    )
    room = MAX_GPUS_PER_NODE - known
    first = range(100, 100 + room)  # fills the node exactly
    second = range(200, 201)  # one more
    frames = [
        (3, frame(gpu_info_batch(node, 1, first))),
        (3, frame(gpu_info_batch(node, 2, second))),
    ]
    answers = {r.seq: r.code for r in pipeline.process(frames, time.time())}
    assert answers == {1: 0, 2: 400}
    total = pipeline.db.query("SELECT count(*) FROM fleet_gpu WHERE node_id = %s", (node_pk,))
    assert int(total[0][0]) == MAX_GPUS_PER_NODE
    discovered = pipeline.db.query(
        "SELECT count(*) FROM fleet_gpu WHERE node_id = %s AND discovered_at IS NOT NULL"
        " AND accepted_at IS NULL",
        (node_pk,),
    )
    assert int(discovered[0][0]) == room  # the agent's new GPUs wait for an admin


def test_a_later_node_info_updates_only_the_keys_it_carries(pipeline: IngestPipeline) -> None:
    """The agent sends its version once, then only what changed (its tuning audit): the
    version must stay known."""
    node = NODES[1]
    first = {"protocol": 1, "source": f"node:{node}", "seq": 50}
    first["node_info"] = {"agent_version": "0.9.1", "tuning": {"findings": ["old"]}}
    later = {"protocol": 1, "source": f"node:{node}", "seq": 51}
    later["node_info"] = {"tuning": {"findings": []}}
    for batch in (first, later):
        [result] = pipeline.process([(2, frame(batch))], time.time())
        assert result.code == 0, result
    (raw,) = pipeline.db.query(
        "SELECT info FROM fleet_node WHERE id = %s", (node_id(pipeline, node),)
    )[0]
    info = json.loads(raw) if isinstance(raw, str) else raw
    assert info == {"agent_version": "0.9.1", "tuning": {"findings": []}}


def test_the_child_announces_saved_latest_state_right_after_the_commit(db_path: Path) -> None:
    """A live page hears of a sample when its commit saved it, not at the next live tick."""
    import socket as socketlib

    from fleet.ingest import frames
    from fleet.ingest.child import ChildLoop

    server_end, child_end = socketlib.socketpair()
    pipeline = IngestPipeline(PickyDb(str(db_path)), save_interval_s=0.0)
    loop = ChildLoop(child_end, pipeline, live_s=3600.0, revalidate_s=3600.0)
    hello = {"source": f"node:{NODES[0]}", "site_id": 1}
    batch = frame(gpu_batch(NODES[0], 900))
    loop._process([(frames.HELLO, 1, json.dumps(hello).encode()), (frames.BATCH, 1, batch)])
    server_end.settimeout(5)
    received = bytearray()
    while len(frames.split_frames(bytearray(received))) < 2:
        received += server_end.recv(1 << 16)
    kinds = [kind for kind, _, _ in frames.split_frames(received)]
    assert kinds[:2] == [frames.RESULTS, frames.CHANGED]
    pipeline.db.close()
    server_end.close()
    child_end.close()


def test_a_writer_saves_its_counters_for_the_metrics(db_path: Path) -> None:
    """Batches stored, samples in them, and a row per writer start (fleet_ingestwriter)."""
    import socket as socketlib

    from fleet.ingest import frames
    from fleet.ingest.child import ChildLoop

    server_end, child_end = socketlib.socketpair()
    pipeline = IngestPipeline(PickyDb(str(db_path)), save_interval_s=0.0)
    loop = ChildLoop(child_end, pipeline, live_s=3600.0, revalidate_s=3600.0)
    hello = {"source": f"node:{NODES[2]}", "site_id": 1}
    items = [(frames.HELLO, 3, json.dumps(hello).encode())]
    items += [(frames.BATCH, 3, frame(gpu_batch(NODES[2], 700 + i))) for i in range(2)]
    loop._process(items)
    loop._save_counters()
    rows = pipeline.db.query(
        "SELECT batches, samples, refused FROM fleet_ingestwriter WHERE writer = %s", (loop.name,)
    )
    assert rows == [(2, 16, 0)]  # two batches of 8 GPU samples
    pipeline.db.close()
    server_end.close()
    child_end.close()


def read_frames(sock: Any, count: int) -> list[tuple[int, int, bytes]]:
    """The first `count` frames the child sends (waits for them, up to the socket's time-out)."""
    from fleet.ingest import frames

    received = bytearray()
    got: list[tuple[int, int, bytes]] = []
    while len(got) < count:
        received += sock.recv(1 << 16)
        got += frames.split_frames(received)
    return got


def test_a_batch_arriving_while_a_round_is_young_is_committed_with_it(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Group commit waits a little for more batches: two agents' batches that arrive apart
    are stored by one commit and answered in one RESULTS frame (fewer rounds, less CPU)."""
    import socket as socketlib
    import threading

    from fleet.ingest import child, frames

    monkeypatch.setattr(child, "ROUND_BATCHES", 2)
    monkeypatch.setattr(child, "ROUND_LINGER_S", 30.0)  # ends when full, long before this
    server_end, child_end = socketlib.socketpair()
    server_end.settimeout(10)
    pipeline = IngestPipeline(PickyDb(str(db_path)), save_interval_s=3600.0)
    loop = child.ChildLoop(child_end, pipeline, live_s=3600.0, revalidate_s=3600.0)
    for conn_id in (1, 2):
        hello = {"source": f"node:{NODES[conn_id - 1]}", "site_id": 1}
        server_end.sendall(frames.frame(frames.HELLO, conn_id, json.dumps(hello).encode()))
    first_read = threading.Event()
    read_available = loop._read_available

    def reading() -> bool:
        try:
            return read_available()
        finally:
            first_read.set()

    monkeypatch.setattr(loop, "_read_available", reading)
    server_end.sendall(frames.frame(frames.BATCH, 1, frame(gpu_batch(NODES[0], 1200))))
    reader = threading.Thread(target=loop._read_round)
    reader.start()
    assert first_read.wait(10)  # the round has taken the first batch: the second comes later
    server_end.sendall(frames.frame(frames.BATCH, 2, frame(gpu_batch(NODES[1], 1200))))
    kind, _, payload = read_frames(server_end, 1)[0]
    reader.join(10)
    assert kind == frames.RESULTS
    assert sorted((conn, seq, code) for conn, seq, code, _ in json.loads(payload)) == [
        (1, 1200, 0),
        (2, 1200, 0),
    ]
    pipeline.db.close()
    server_end.close()
    child_end.close()


def test_a_lone_batch_is_answered_once_the_round_has_waited_its_while(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A quiet writer does not hold a batch for more company than the linger allows."""
    import socket as socketlib

    from fleet.ingest import child, frames

    monkeypatch.setattr(child, "ROUND_LINGER_S", 0.01)
    server_end, child_end = socketlib.socketpair()
    server_end.settimeout(10)
    pipeline = IngestPipeline(PickyDb(str(db_path)), save_interval_s=3600.0)
    loop = child.ChildLoop(child_end, pipeline, live_s=3600.0, revalidate_s=3600.0)
    hello = {"source": f"node:{NODES[2]}", "site_id": 1}
    server_end.sendall(frames.frame(frames.HELLO, 3, json.dumps(hello).encode()))
    server_end.sendall(frames.frame(frames.BATCH, 3, frame(gpu_batch(NODES[2], 1300))))
    assert loop._read_round()
    kind, _, payload = read_frames(server_end, 1)[0]
    assert kind == frames.RESULTS
    assert [(conn, seq, code) for conn, seq, code, _ in json.loads(payload)] == [(3, 1300, 0)]
    pipeline.db.close()
    server_end.close()
    child_end.close()
