"""Ingest that survives what production does to it: several server processes on one
database, Redis and PostgreSQL going away, hostile neighbours, stalled sockets."""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from fleet.storage.latest import LatestRow, rows_to_latest, select_latest_sql
from tests.support import needs
from tests.support.agent import enroll, gpu_batch, post_json
from tests.support.live import create_ops_user, live_socket, login_cookie
from tests.support.pg_outage import database_down
from tests.support.rawws import StalledWebSocket
from tests.support.redis_proc import RedisProcess
from tests.support.server import FleetServer


def ws_connect(server: FleetServer, token: str) -> ClientConnection:
    headers = {"Authorization": f"Bearer {token}"}
    return connect(server.ws_url + "/ws/ingest/v1", additional_headers=headers)


def post(server: FleetServer, batch: dict[str, Any], token: str) -> tuple[int, dict[str, Any]]:
    return post_json(server.url + "/api/v1/ingest", batch, token)


def latest_gpu(server: FleetServer, node: str, gpu: int = 0) -> LatestRow | None:
    where = f"gpu = {gpu} AND node_id = (SELECT id FROM fleet_node WHERE name = ?)"
    rows = rows_to_latest("gpu", server.query(select_latest_sql("gpu", where), (node,)))
    return next(iter(rows.values()), None)


def wait_for(check: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or check}")


def stored(server: FleetServer, node: str) -> int:
    where = "node_id = (SELECT id FROM fleet_node WHERE name = ?)"
    return server.count("gpu", where, (node,))


# -- several server processes ----------------------------------------------------------


def test_a_node_moving_between_two_server_processes_never_moves_a_field_back_in_time(
    tier: str, tmp_path: Path
) -> None:
    # Two server processes, each with two ingest children: four writers on one database.
    env = {"FLEETWATCH_INGEST_WRITERS": "2"}
    with FleetServer.started(tmp_path / "server", tier=tier, extra_env=env) as first:
        second = first.sibling()
        second.start()
        try:
            node = "gpu-a01-01"
            token = enroll(first, f"node:{node}")
            t0 = time.time() - 60
            # (server, batch): the node hops between processes; seq 1 is resent late to
            # the first process after newer data went through the second.
            steps = [
                (first, gpu_batch(node, 1, ts=t0, energy_j=1_000_000.0, ecc_dbe_vol_total=5)),
                (second, gpu_batch(node, 2, ts=t0 + 10, ecc_dbe_vol_total=7, temp_gpu_c=70)),
                (first, gpu_batch(node, 1, ts=t0, energy_j=1_000_000.0, ecc_dbe_vol_total=5)),
                (second, gpu_batch(node, 3, ts=t0 + 15, temp_gpu_c=71)),
                (first, gpu_batch(node, 4, ts=t0 + 20, energy_j=1_007_350.0)),
            ]
            seen: dict[str, float] = {}
            for server, batch in steps:
                status, body = post(server, batch, token)
                assert status == 200, body
                for _ in range(6):  # watch the row while saves land (0.2 s intervals)
                    row = latest_gpu(first, node)
                    if row is not None:
                        for name, ts in row.ts.items():
                            assert ts >= seen.get(name, 0.0), f"{name} went back in time"
                            seen[name] = ts
                    time.sleep(0.1)

            def settled() -> bool:
                row = latest_gpu(first, node)
                return row is not None and row.values.get("energy_j") == 1_007_350.0

            wait_for(settled, what="the last sample's energy in the latest state")
            row = latest_gpu(second, node)
            assert row is not None
            assert (row.values["ecc_dbe_vol_total"], row.ts["ecc_dbe_vol_total"]) == (7, t0 + 10)
            assert (row.values["energy_j"], row.ts["energy_j"]) == (1_007_350.0, t0 + 20)
            assert row.values["temp_gpu_c"] == 60 and row.ts["temp_gpu_c"] == t0 + 20
            assert row.newest == t0 + 20
        finally:
            second.stop()


# -- Redis away ------------------------------------------------------------------------


@pytest.mark.services
def test_ingest_is_acked_while_redis_is_away_and_live_pushes_resume_when_it_returns(
    tmp_path: Path,
) -> None:
    if not RedisProcess.available():
        needs.missing(needs.SERVICES, "redis-server is not installed")
    redis = RedisProcess(tmp_path / "redis")
    redis.start()
    try:
        with FleetServer.started(tmp_path / "server", tier="services", redis_url=redis.url) as s:
            create_ops_user(s)
            cookie = login_cookie(s)
            node = "gpu-a01-02"
            token = enroll(s, f"node:{node}")
            with live_socket(s, cookie) as live:
                assert post(s, gpu_batch(node, 1), token)[0] == 200
                assert "racks" in json.loads(live.recv(timeout=10))  # pushes work
            acked: list[int] = []
            with ws_connect(s, token) as ws:
                redis.stop()
                for seq in range(2, 22):
                    ws.send(json.dumps(gpu_batch(node, seq)))
                    acked.append(json.loads(ws.recv(timeout=10))["ack"])
                    time.sleep(0.15)
                redis.start()
                for seq in range(22, 27):
                    ws.send(json.dumps(gpu_batch(node, seq)))
                    acked.append(json.loads(ws.recv(timeout=10))["ack"])
            assert acked == list(range(2, 27))
            assert stored(s, node) == 26 * 8
            # a page that reconnects gets pushes again
            with reconnecting_live_socket(s, login_cookie(s)) as live:
                # open means subscribed: Channels joins a socket's groups before accepting it
                assert post(s, gpu_batch(node, 27), token)[0] == 200
                update = json.loads(live.recv(timeout=10))
                assert update["racks"]
            log = s.log_path.read_text()
            assert log.count("ingest child started") <= 1, "the ingest child was restarted"
            assert "exited" not in log
    finally:
        redis.stop()


def reconnecting_live_socket(server: FleetServer, cookie: str) -> ClientConnection:
    """What the page does: reconnect with a short backoff until the socket opens."""
    for attempt in range(5):
        try:
            return live_socket(server, cookie)  # type: ignore[no-any-return]
        except Exception:
            if attempt == 4:
                raise
            time.sleep(0.5 * 2**attempt)
    raise AssertionError("unreachable")


# -- PostgreSQL away -------------------------------------------------------------------


def _db_name(server: FleetServer) -> str:
    assert server.database_url
    return urllib.parse.urlsplit(server.database_url).path.lstrip("/")


def post_until_stored(server: FleetServer, batch: dict[str, Any], token: str) -> list[int]:
    """What an agent does: resend until the answer is final; return every status seen."""
    statuses: list[int] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status, _ = post(server, batch, token)
        statuses.append(status)
        if status != 503:
            return statuses
        time.sleep(0.3)
    raise AssertionError(f"never stored: {statuses}")


@pytest.mark.services
def test_ingest_resumes_by_itself_after_a_database_restart(tmp_path: Path) -> None:
    with FleetServer.started(tmp_path / "server", tier="services") as server:
        node = "gpu-a01-03"
        token = enroll(server, f"node:{node}")
        pid = server.proc.pid if server.proc else None
        for seq in range(1, 4):
            assert post(server, gpu_batch(node, seq), token)[0] == 200
        with database_down(_db_name(server)):
            during = [post(server, gpu_batch(node, seq), token)[0] for seq in (4, 5)]
            # a WebSocket agent reconnecting now is told to come back (1011), not refused
            with ws_connect(server, token) as ws, pytest.raises(ConnectionClosed) as closed:
                ws.send(json.dumps(gpu_batch(node, 4)))
                ws.recv(timeout=10)
            time.sleep(1.0)
        assert set(during) == {503}, during  # retry later, never "refused"
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
        for seq in (4, 5, 6, 7):
            assert post_until_stored(server, gpu_batch(node, seq), token)[-1] == 200
        assert server.proc is not None and server.proc.pid == pid  # no server restart
        assert stored(server, node) == 7 * 8


@pytest.mark.services
def test_a_commit_that_times_out_on_a_lock_is_answered_503_and_stored_on_resend(
    tmp_path: Path,
) -> None:
    import psycopg

    from fleet.storage.db import pg_conninfo
    from fleetwatch.env import database_from_url

    env = {"FLEETWATCH_PG_LOCK_TIMEOUT_MS": "300"}
    with FleetServer.started(tmp_path / "server", tier="services", extra_env=env) as server:
        node = "gpu-a01-04"
        token = enroll(server, f"node:{node}")
        assert server.database_url
        conninfo = pg_conninfo(database_from_url(server.database_url))
        with psycopg.connect(conninfo) as holder:
            holder.execute("LOCK TABLE fw_gpu_raw IN EXCLUSIVE MODE")
            status, body = post(server, gpu_batch(node, 1), token)
            holder.rollback()
        assert status == 503, body
        assert "resend" in body["error"]["reason"]
        assert post(server, gpu_batch(node, 1), token)[0] == 200
        assert stored(server, node) == 8


# -- a bad batch hurts only itself -------------------------------------------------------


def _deep(levels: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for _ in range(levels):
        out = {"x": out}
    return out


HOSTILE: list[Callable[[dict[str, Any]], None]] = [
    lambda b: b.update(seq=2**63),
    lambda b: b.update(node_info=_deep(300)),
    lambda b: b.update(events=[{"ts": b["gpu"][0]["ts"], "kind": ["xid"]}]),
]


@pytest.fixture(scope="module")
def ops_cookie(fleet_server: FleetServer) -> Iterator[str]:
    create_ops_user(fleet_server)
    yield login_cookie(fleet_server)


def test_hostile_batches_are_refused_alone_while_a_pipelining_neighbour_keeps_being_acked(
    fleet_server: FleetServer, ops_cookie: str
) -> None:
    good_node, bad_node = "gpu-a03-01", "gpu-a03-02"
    good_token = enroll(fleet_server, f"node:{good_node}")
    bad_token = enroll(fleet_server, f"node:{bad_node}")
    now = time.time()
    with ws_connect(fleet_server, good_token) as good, ws_connect(fleet_server, bad_token) as bad:
        for i, spoil in enumerate(HOSTILE):
            good.send(json.dumps(gpu_batch(good_node, 2 * i + 1, ts=now - 10 + i)))
            hostile = gpu_batch(bad_node, 100 + i, ts=now - 10 + i)
            spoil(hostile)
            bad.send(json.dumps(hostile))
            good.send(json.dumps(gpu_batch(good_node, 2 * i + 2, ts=now - 9.5 + i)))
        acks = sorted(json.loads(good.recv(timeout=10))["ack"] for _ in range(6))
        nacks = [json.loads(bad.recv(timeout=10)) for _ in HOSTILE]
        bad.send(json.dumps(gpu_batch(bad_node, 200, ts=now)))  # the hostile one lives on too
        assert json.loads(bad.recv(timeout=10))["ack"] == 200
    assert acks == [1, 2, 3, 4, 5, 6]
    assert all(n["error"]["code"] == 400 for n in nacks), nacks
    assert stored(fleet_server, good_node) == 6 * 8
    assert stored(fleet_server, bad_node) == 8  # only its good batch

    def last_seq() -> Any:
        sql = "SELECT last_seq FROM fleet_sourcetoken WHERE source = ? AND revoked = ?"
        return fleet_server.query(sql, (f"node:{good_node}", False))[0][0]

    wait_for(lambda: last_seq() == 6, what="the neighbour's last_seq")
    with live_socket(fleet_server, ops_cookie) as live:
        # open means subscribed: Channels joins a socket's groups before accepting it
        assert post(fleet_server, gpu_batch(good_node, 7), good_token)[0] == 200
        assert json.loads(live.recv(timeout=10))["racks"]  # live pushes keep going


def test_an_agent_that_stops_reading_does_not_delay_another_agents_acks(
    fleet_server: FleetServer,
) -> None:
    stalled_node, calm_node = "gpu-a03-03", "gpu-a03-04"
    stalled_token = enroll(fleet_server, f"node:{stalled_node}")
    calm_token = enroll(fleet_server, f"node:{calm_node}")
    stalled = StalledWebSocket("127.0.0.1", fleet_server.port, "/ws/ingest/v1", stalled_token)
    # Each batch is refused with a nack that names its 20,000-character field, so the
    # answers the stalled agent never reads fill the kernel's buffers (several MB on
    # loopback) within a few hundred batches.
    sample = {"ts": time.time(), "gpu": 0, "x" * 20_000: 1}
    refused = json.dumps(gpu_batch(stalled_node, 1, gpus=1) | {"gpu": [sample]})
    try:
        pushed_back = False
        for _ in range(5_000):
            if not stalled.send(refused, timeout=2.0):
                pushed_back = True  # the server stopped reading the agent that stopped reading
                break
        assert pushed_back, "the server kept reading a peer that never reads its answers"
        waits = []
        with ws_connect(fleet_server, calm_token) as calm:
            for seq in range(1, 11):
                started = time.monotonic()
                calm.send(json.dumps(gpu_batch(calm_node, seq)))
                assert json.loads(calm.recv(timeout=10))["ack"] == seq
                waits.append(time.monotonic() - started)
        assert max(waits) < 2.0, waits
    finally:
        stalled.close()
