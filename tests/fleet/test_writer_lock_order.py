"""Two writers of samples on one PostgreSQL database lock the rows they share in one order,
so they wait for each other and never deadlock. Two ingest children hold the same node's
rows whenever a proxy spreads its HTTP batches over two server processes (or the node
reconnects to the other one); a deadlock costs the victim's round a second's wait and a
rerun, or a 503 for each of its batches (CI saw one: tests/fleet/test_nginx_two_servers.py).

The lock-order tests stop one writer right after a statement that writes — holding what
its transaction has locked — until the other writer waits on a lock, then let it go on: with
the rows locked in different orders that is a deadlock every time, which the tests see in
the writers' `deadlocks` counts. The last test is of the backstop, the rerun of a deadlock's
victim. PostgreSQL only (SQLite has one writer at a time)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from fleet.ingest.pipeline import OK, IngestPipeline
from fleet.models import GPU, Hall, Node, Rack, Site, SourceToken
from fleet.storage.db import PostgresDb, pg_conninfo
from fleet.storage.dialect import failure_kind
from fleet.storage.latest import LatestDelta
from fleet.storage.samples import SampleWrite, write_samples
from fleetwatch.env import database_from_url
from tests.support import databases
from tests.support.agent import gpu_batch
from tests.support.databases import TierDb
from tests.support.waiting import wait_until

pytestmark = pytest.mark.services

NODE = "gpu-lock-01"
SOURCE = f"node:{NODE}"
GPUS = 8
WAIT_S = 15.0


pg = databases.fresh_postgres_db  # a PostgreSQL database of the test's own


class PausingDb(PostgresDb):
    """A storage connection that, once `pause_next` is set, stops right after its next
    statement that writes (and names `pause_on`, when set), holding what its transaction
    has locked, until `release` is set."""

    def __init__(self, conninfo: str) -> None:
        super().__init__(conninfo)
        self.pause_next = False
        self.pause_on = ""
        self.holding = threading.Event()
        self.release = threading.Event()

    def _connection(self) -> Any:
        return _PausingConnection(super()._connection(), self)

    def after(self, sql: str) -> None:
        if not self.pause_next or not sql.lstrip().startswith(WRITES):
            return
        if self.pause_on in sql:
            self.pause_next = False
            self.holding.set()
            assert self.release.wait(WAIT_S), "never released"


WRITES = ("INSERT", "UPDATE", "DELETE")  # a COPY into a temp stage locks nothing shared


class _PausingConnection:
    def __init__(self, conn: Any, db: PausingDb) -> None:
        self._conn, self._db = conn, db

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    @contextlib.contextmanager
    def cursor(self) -> Iterator[Any]:
        with self._conn.cursor() as cur:
            yield _PausingCursor(cur, self._db)


class _PausingCursor:
    def __init__(self, cur: Any, db: PausingDb) -> None:
        self._cur, self._db = cur, db

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)

    def execute(self, sql: Any, *args: Any, **kwargs: Any) -> Any:
        result = self._cur.execute(sql, *args, **kwargs)
        self._db.after(str(sql))
        return result

    def executemany(self, sql: Any, *args: Any, **kwargs: Any) -> None:
        self._cur.executemany(sql, *args, **kwargs)
        self._db.after(str(sql))


def storage(db: TierDb, kind: type[PostgresDb] = PostgresDb) -> PostgresDb:
    assert db.url is not None
    return kind(pg_conninfo(database_from_url(db.url)))


def seed_node(db: TierDb, names: tuple[str, ...] = (NODE,)) -> tuple[int, int]:
    """Nodes with eight GPUs each and their agents' tokens (token hash: the node's name);
    returns the site's id and the first node's."""
    site = Site.objects.using(db.alias).create(slug="locks", name="Locks")
    hall = Hall.objects.using(db.alias).create(site=site, name="A")
    rack = Rack.objects.using(db.alias).create(hall=hall, name="A01", power_budget_kw=80)
    ids = []
    for name in names:
        node = Node.objects.using(db.alias).create(name=name, rack=rack)
        GPU.objects.using(db.alias).bulk_create(GPU(node=node, index=i) for i in range(GPUS))
        SourceToken.objects.using(db.alias).create(
            source=f"node:{name}", kind="node", site=site, token_hash=name
        )
        ids.append(node.id)
    return site.id, ids[0]


def waits_on_a_lock(db: TierDb) -> bool:
    sql = (
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    return int(db.execute(sql)[0][0]) > 0


def run_in_thread(work: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Start `work` in a thread; the list gets its result, or the exception it raised."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(work())
        except Exception as exc:  # kept for the test to show
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def interleave(
    db: TierDb, first: PausingDb, first_work: Callable[[], Any], second_work: Callable[[], Any]
) -> tuple[Any, Any]:
    """`first_work` stops after its first write; `second_work` runs until it waits on a
    lock; then both go on. Returns what each returned (or raised)."""
    first.pause_next = True
    one, first_out = run_in_thread(first_work)
    two: threading.Thread | None = None
    second_out: list[Any] = []
    try:
        assert first.holding.wait(WAIT_S), "the first writer never wrote"
        two, second_out = run_in_thread(second_work)
        wait_until(lambda: waits_on_a_lock(db) or not two.is_alive(), WAIT_S, "a lock wait")
    finally:
        first.release.set()
        one.join(WAIT_S)
        if two is not None:
            two.join(WAIT_S)
    assert first_out and second_out, "a writer is still running"
    return first_out[0], second_out[0]


def pipeline(db: Any, site_id: int, nodes: tuple[str, ...] = (NODE,)) -> IngestPipeline:
    """An ingest child's pipeline with a connection from each node (ids from 1)."""
    writer = IngestPipeline(db, save_interval_s=3600.0)
    for conn_id, name in enumerate(nodes, start=1):
        writer.hello(conn_id, f"node:{name}", site_id, name)
    return writer


def frame(seq: int, ts: float, temp_c: int) -> list[tuple[int, bytes]]:
    batch = gpu_batch(NODE, seq, ts=ts, gpus=GPUS, temp_gpu_c=temp_c)
    return [(1, json.dumps(batch).encode())]


def described(node: str, conn_id: int, seq: int, ts: float) -> tuple[int, bytes]:
    """A batch of `node` that carries its node and GPU info (inventory statements: the
    node's row, then its GPU's)."""
    batch = gpu_batch(node, seq, ts=ts, gpus=GPUS)
    batch["node_info"] = {"hostname": node, "seq": seq}
    batch["gpu_info"] = [{"gpu": 0, "model": "NVIDIA H200"}]
    return conn_id, json.dumps(batch).encode()


def test_a_save_in_one_child_and_a_commit_in_the_other_of_one_node_both_succeed(
    pg: TierDb,
) -> None:
    site_id, node_id = seed_node(pg)
    a, b = pipeline(storage(pg, PausingDb), site_id), pipeline(storage(pg), site_id)
    now = time.time()
    # Each child committed a batch of the node: both hold its latest state and its
    # source's last seq, not yet saved (the proxy sent its batches to both).
    assert [r.code for r in a.process(frame(1, now - 3, 61), now - 3)] == [OK]
    assert [r.code for r in b.process(frame(2, now - 2, 62), now - 2)] == [OK]
    a.save_interval_s = b.save_interval_s = 0.0
    assert isinstance(a.db, PausingDb) and isinstance(b.db, PostgresDb)

    saved, answered = interleave(
        pg, a.db, lambda: a.flush(now), lambda: b.process(frame(3, now - 1, 63), now)
    )

    assert saved is None and a.counters.save_failures == 0
    assert isinstance(answered, list) and [r.code for r in answered] == [OK], answered
    assert (a.db.deadlocks, b.db.deadlocks) == (0, 0)
    b.flush(now + 1)  # the newest batch's state
    sql = "SELECT DISTINCT temp_gpu_c FROM fw_gpu_latest WHERE node_id = %s"
    assert pg.execute(sql, [node_id]) == [(63,)]
    assert pg.execute("SELECT last_seq FROM fleet_sourcetoken") == [(3,)]
    for writer in (a, b):
        writer.db.close()


def test_two_children_committing_rounds_of_the_same_nodes_in_opposite_orders_both_commit(
    pg: TierDb,
) -> None:
    """Batches arrive in any order; each round's inventory statements (here node info)
    lock their rows in source order."""
    nodes = ("gpu-lock-01", "gpu-lock-02")
    site_id, _ = seed_node(pg, nodes)
    first, second = storage(pg, PausingDb), storage(pg)
    assert isinstance(first, PausingDb)
    first.pause_on = "fleet_node"
    a, b = pipeline(first, site_id, nodes), pipeline(second, site_id, nodes)
    now = time.time()
    a_round = [described(nodes[1], 2, 1, now - 2), described(nodes[0], 1, 1, now - 2)]
    b_round = [described(nodes[0], 1, 2, now - 1), described(nodes[1], 2, 2, now - 1)]

    answered_a, answered_b = interleave(
        pg, first, lambda: a.process(a_round, now), lambda: b.process(b_round, now)
    )

    for answered in (answered_a, answered_b):
        assert isinstance(answered, list) and [r.code for r in answered] == [OK, OK], answered
    assert (first.deadlocks, second.deadlocks) == (0, 0)
    for db in (first, second):
        db.close()


def _shapes(node_id: int, now: float) -> tuple[LatestDelta, LatestDelta]:
    """Two GPUs in two shapes, the shapes swapped between the writers."""
    first, second = LatestDelta(), LatestDelta()
    full = {"temp_gpu_c": 70, "power_w": 500.0}
    first.add("gpu", (node_id, 0), {"ts": now, **full}, now)
    first.add("gpu", (node_id, 1), {"ts": now, "temp_gpu_c": 71}, now)
    second.add("gpu", (node_id, 1), {"ts": now, **full}, now)
    second.add("gpu", (node_id, 0), {"ts": now, "temp_gpu_c": 71}, now)
    return first, second


def _kinds(node_id: int, now: float) -> tuple[LatestDelta, LatestDelta]:
    """A node and its GPU, seen by one writer node first and by the other GPU first."""
    first, second = LatestDelta(), LatestDelta()
    first.add("node", (node_id,), {"ts": now, "power_w": 3000.0}, now)
    first.add("gpu", (node_id, 0), {"ts": now, "temp_gpu_c": 70}, now)
    second.add("gpu", (node_id, 0), {"ts": now, "temp_gpu_c": 71}, now)
    second.add("node", (node_id,), {"ts": now, "power_w": 3100.0}, now)
    return first, second


@pytest.mark.parametrize("deltas", [_shapes, _kinds], ids=["in-two-shapes", "of-two-kinds"])
def test_two_writers_merging_the_same_latest_state_in_different_orders_both_commit(
    pg: TierDb, deltas: Callable[[int, float], tuple[LatestDelta, LatestDelta]]
) -> None:
    _, node_id = seed_node(pg)
    now = time.time()
    first_delta, second_delta = deltas(node_id, now)
    seeding = storage(pg)
    write_samples(seeding, SampleWrite(), _every_row(node_id, now - 10))  # rows exist: updates
    one, two = storage(pg, PausingDb), storage(pg)
    assert isinstance(one, PausingDb)

    results = interleave(
        pg,
        one,
        lambda: write_samples(one, SampleWrite(), first_delta),
        lambda: write_samples(two, SampleWrite(), second_delta),
    )

    assert results == ({}, {})
    assert (one.deadlocks, two.deadlocks) == (0, 0)
    # a field a writer's entity did not carry kept its value (bound as nothing, never NULL)
    power = pg.execute("SELECT power_w FROM fw_gpu_latest WHERE node_id = %s", [node_id])
    assert len(power) == GPUS and None not in {p for (p,) in power}, power
    for db in (seeding, one, two):
        db.close()


def _every_row(node_id: int, at: float) -> LatestDelta:
    delta = LatestDelta()
    delta.add("node", (node_id,), {"ts": at, "power_w": 1.0}, at)
    for gpu in range(GPUS):
        delta.add("gpu", (node_id, gpu), {"ts": at, "temp_gpu_c": 1, "power_w": 1.0}, at)
    return delta


def test_a_writer_chosen_as_a_deadlocks_victim_runs_its_transaction_again(pg: TierDb) -> None:
    """The backstop behind the lock order: a transaction PostgreSQL aborts to break a
    deadlock (here with an outside session locking in the opposite order) is run again, and
    its rows are stored, instead of its round being answered 503."""
    _, node_id = seed_node(pg)
    now = time.time()
    writer = storage(pg)
    # PostgreSQL looks for a deadlock once, deadlock_timeout after a wait begins: the
    # writer's look must come after the outside session waits too, however slow the machine
    try:
        writer.query("SET deadlock_timeout = '3s'")
    except psycopg.errors.InsufficientPrivilege:
        pytest.skip("setting deadlock_timeout takes a PostgreSQL superuser")
    write_samples(writer, SampleWrite(), _every_row(node_id, now - 10))
    touch_source = ("UPDATE fleet_sourcetoken SET last_seq = %s WHERE source = %s", (7, SOURCE))
    delta = LatestDelta()
    delta.add("gpu", (node_id, 0), {"ts": now, "temp_gpu_c": 77}, now)
    assert pg.url is not None
    with psycopg.connect(pg_conninfo(database_from_url(pg.url))) as outside:
        # the outside session looks later: the writer, waiting first, is the victim
        outside.execute("SET deadlock_timeout = '30s'")
        outside.execute(
            "UPDATE fw_gpu_latest SET temp_gpu_c = 0 WHERE node_id = %s AND gpu = 0", [node_id]
        )
        thread, out = run_in_thread(
            lambda: write_samples(writer, SampleWrite(statements=[touch_source]), delta)
        )
        wait_until(lambda: waits_on_a_lock(pg), WAIT_S, "the writer waiting for the GPU row")
        outside.execute("UPDATE fleet_sourcetoken SET revoked = false WHERE source = %s", [SOURCE])
        outside.commit()
    thread.join(WAIT_S)
    assert out == [{}], out
    assert writer.deadlocks == 1
    row = pg.execute(
        "SELECT temp_gpu_c FROM fw_gpu_latest WHERE node_id = %s AND gpu = 0", [node_id]
    )
    assert row == [(77,)]
    assert pg.execute("SELECT last_seq FROM fleet_sourcetoken") == [(7,)]
    writer.close()


def test_a_transaction_that_deadlocks_twice_is_given_up_as_a_retry_storing_nothing(
    pg: TierDb,
) -> None:
    """The backstop runs a victim again once only: a second deadlock propagates, classified
    as transient (the round is answered 503 and its agents resend), and nothing is stored."""
    seed_node(pg)
    writer = storage(pg)
    runs: list[int] = []

    def deadlocking(tx: Any) -> None:
        runs.append(1)
        tx.execute("UPDATE fleet_sourcetoken SET last_seq = %s WHERE source = %s", (9, SOURCE))
        raise psycopg.errors.DeadlockDetected("deadlock detected")

    with pytest.raises(psycopg.errors.DeadlockDetected) as failed:
        writer.transaction(deadlocking)

    assert len(runs) == 2 and writer.deadlocks == 1
    assert failure_kind(failed.value) == "retry"
    assert pg.execute("SELECT last_seq FROM fleet_sourcetoken") == [(None,)]
    assert writer.query("SELECT 1") == [(1,)]  # the connection is usable afterwards
    writer.close()
