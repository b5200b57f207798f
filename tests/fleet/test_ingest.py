"""Ingest over real connections to a real server, on every tier."""

from __future__ import annotations

import json
import time

import pytest
from websockets.exceptions import ConnectionClosed

from tests.support.agent import enroll, gpu_batch, post_json, ws_connect
from tests.support.server import FleetServer


def stored_for(server: FleetServer, node: str) -> int:
    return server.count("gpu", "node_id = (SELECT id FROM fleet_node WHERE name = ?)", (node,))


def test_batch_over_websocket_is_acked_after_it_is_stored(fleet_server: FleetServer) -> None:
    token = enroll(fleet_server, "node:gpu-a01-01")
    with ws_connect(fleet_server, token) as ws:
        for seq in (1, 2, 3):
            ws.send(json.dumps(gpu_batch("gpu-a01-01", seq, ts=time.time() + seq)))
        acks = [json.loads(ws.recv(timeout=10)) for _ in range(3)]
    assert [a["ack"] for a in acks] == [1, 2, 3]
    assert all(abs(a["t"] - time.time()) < 10 for a in acks)  # the server's clock, for offsets
    assert stored_for(fleet_server, "gpu-a01-01") == 24


def test_batch_over_http_is_acked_after_it_is_stored(fleet_server: FleetServer) -> None:
    token = enroll(fleet_server, "node:gpu-a01-02")
    status, body = post_json(fleet_server.url + "/api/v1/ingest", gpu_batch("gpu-a01-02", 7), token)
    assert (status, body["ack"]) == (200, 7)
    assert stored_for(fleet_server, "gpu-a01-02") == 8


def test_batch_resent_after_a_lost_ack_is_stored_once(fleet_server: FleetServer) -> None:
    token = enroll(fleet_server, "node:gpu-a01-03")
    batch = json.dumps(gpu_batch("gpu-a01-03", 1))
    with ws_connect(fleet_server, token) as ws:
        ws.send(batch)  # the agent goes away before it reads the ack
    deadline = time.monotonic() + 10
    while stored_for(fleet_server, "gpu-a01-03") < 8 and time.monotonic() < deadline:
        time.sleep(0.05)
    with ws_connect(fleet_server, token) as ws:
        ws.send(batch)
        assert json.loads(ws.recv(timeout=10))["ack"] == 1
    status, body = post_json(fleet_server.url + "/api/v1/ingest", json.loads(batch), token)
    assert (status, body["ack"]) == (200, 1)
    assert stored_for(fleet_server, "gpu-a01-03") == 8


def test_unknown_token_is_refused_with_401_and_4401(fleet_server: FleetServer) -> None:
    status, _ = post_json(
        fleet_server.url + "/api/v1/ingest", gpu_batch("gpu-a01-04", 1), "fwn_not-a-token"
    )
    assert status == 401
    with ws_connect(fleet_server, "fwn_not-a-token") as ws, pytest.raises(ConnectionClosed) as e:
        ws.recv(timeout=10)
    assert e.value.rcvd is not None and e.value.rcvd.code == 4401
    assert stored_for(fleet_server, "gpu-a01-04") == 0


def test_a_token_cannot_write_another_nodes_data(fleet_server: FleetServer) -> None:
    token = enroll(fleet_server, "node:gpu-a03-01")
    other = gpu_batch("gpu-a03-02", 1)
    status, body = post_json(fleet_server.url + "/api/v1/ingest", other, token)
    assert status == 403 and body["error"]["field"] == "source"
    with ws_connect(fleet_server, token) as ws:
        ws.send(json.dumps(other))
        nack = json.loads(ws.recv(timeout=10))
        with pytest.raises(ConnectionClosed) as e:
            ws.recv(timeout=10)
    assert nack["error"]["code"] == 403
    assert e.value.rcvd is not None and e.value.rcvd.code == 4403
    assert stored_for(fleet_server, "gpu-a03-02") == 0


# One fixed time for the good batch of every case: its resends are stored once.
GOOD_TS = time.time() - 600


@pytest.mark.parametrize(
    ("mutate", "field", "reason"),
    [
        (lambda b: b["gpu"][2].pop("ts"), "gpu[2].ts", "Unix time"),
        (lambda b: b["gpu"][0].update(bogus_w=1), "gpu[0].bogus_w", "unknown gpu metric"),
        (lambda b: b["gpu"][1].update(temp_mem_c=9223372036854775794), "gpu[1].temp_mem_c", "DCGM"),
        (lambda b: b["gpu"][0].update(power_w=None), "gpu[0].power_w", "leave an unsupported"),
        (lambda b: b["gpu"][0].update(util_gpu_pct=True), "gpu[0].util_gpu_pct", "number"),
        (lambda b: b["gpu"][3].update(power_w=-5), "gpu[3].power_w", "outside"),
        (lambda b: b["gpu"][0].update(ts=time.time() + 3600), "gpu[0].ts", "future"),
        (lambda b: b["gpu"][0].update(ts=time.time() - 3 * 86400), "gpu[0].ts", "up to 24 h old"),
        (lambda b: b.update(protocol=2), "protocol", "must be 1"),
        (lambda b: b.update(protocol=True), "protocol", "must be 1"),
        (lambda b: b.update(sent_at="now"), "sent_at", "number"),
        (lambda b: b.update(node=[{"ts": GOOD_TS, "gpu": 0}]), "node[0].gpu", "unknown node"),
        (lambda b: b["gpu"][7].update(gpu=2), "gpu[7]", "gpu[2] and gpu[7]: the same GPU 2"),
    ],
)
def test_malformed_batch_is_refused_naming_the_field_and_stores_nothing(
    fleet_server: FleetServer, mutate, field: str, reason: str
) -> None:
    node = "gpu-a03-03"
    token = enroll(fleet_server, f"node:{node}")
    batch = gpu_batch(node, 1)
    mutate(batch)
    status, body = post_json(fleet_server.url + "/api/v1/ingest", batch, token)
    assert status == 400
    assert body["error"]["field"] == field
    assert reason in body["error"]["reason"]
    with ws_connect(fleet_server, token) as ws:
        ws.send(json.dumps(batch))
        nack = json.loads(ws.recv(timeout=10))
        ws.send(json.dumps(gpu_batch(node, 2, ts=GOOD_TS)))  # the connection lives on
        assert json.loads(ws.recv(timeout=10))["ack"] == 2
    assert nack == {"nack": batch.get("seq"), "error": body["error"]}
    assert stored_for(fleet_server, node) == 8  # only the good batch


def test_invalid_json_is_refused_with_400(fleet_server: FleetServer) -> None:
    token = enroll(fleet_server, "node:gpu-a03-04")
    status, body = post_json(fleet_server.url + "/api/v1/ingest", b"{not json", token)
    assert status == 400 and "JSON" in body["error"]["reason"]


def test_oversized_batch_is_refused_with_413_and_stores_nothing(
    fleet_server: FleetServer,
) -> None:
    node = "gpu-a04-01"
    token = enroll(fleet_server, f"node:{node}")
    huge = gpu_batch(node, 1)
    huge["events"] = [{"ts": time.time(), "kind": "note", "detail": "x" * 1_100_000}]
    status, _ = post_json(fleet_server.url + "/api/v1/ingest", huge, token)
    assert status == 413
    with ws_connect(fleet_server, token) as ws:
        ws.send(json.dumps(huge))
        nack = json.loads(ws.recv(timeout=10))
    assert nack["error"]["code"] == 413
    assert stored_for(fleet_server, node) == 0


def test_latest_state_is_the_newest_sample_with_slow_fields_kept(
    fleet_server: FleetServer,
) -> None:
    node = "gpu-a04-02"
    token = enroll(fleet_server, f"node:{node}")
    t0 = time.time() - 10
    url = fleet_server.url + "/api/v1/ingest"
    # energy is read on a slow cadence: present in the first sample only
    assert (
        post_json(url, gpu_batch(node, 1, ts=t0, temp_gpu_c=55, energy_j=1000.0), token)[0] == 200
    )
    assert post_json(url, gpu_batch(node, 3, ts=t0 + 2, temp_gpu_c=71), token)[0] == 200
    assert post_json(url, gpu_batch(node, 2, ts=t0 + 1, temp_gpu_c=63), token)[0] == 200  # late
    deadline = time.monotonic() + 10
    rows: list[tuple[object, ...]] = []
    while time.monotonic() < deadline:
        rows = fleet_server.query(
            "SELECT ts, temp_gpu_c, energy_j FROM fw_gpu_latest l JOIN fleet_node n "
            "ON n.id = l.node_id WHERE n.name = ? AND l.gpu = 0",
            (node,),
        )
        if rows and rows[0][1] == 71:
            break
        time.sleep(0.1)
    assert rows == [(pytest.approx(t0 + 2), 71, 1000.0)]


def test_one_agents_pipelined_rejections_do_not_disconnect_other_agents(
    fleet_server: FleetServer,
) -> None:
    bystander = enroll(fleet_server, "node:gpu-a04-03")
    offender = enroll(fleet_server, "node:gpu-a04-04")
    with ws_connect(fleet_server, bystander) as calm, ws_connect(fleet_server, offender) as bad:
        with pytest.raises(ConnectionClosed) as closed:
            # three batches for another node, pipelined in one go (the server may close
            # the connection before the last is sent)
            for seq in (1, 2, 3):
                bad.send(json.dumps(gpu_batch("gpu-a04-03", seq)))
            while True:
                bad.recv(timeout=10)
        calm.send(json.dumps(gpu_batch("gpu-a04-03", 1)))
        assert json.loads(calm.recv(timeout=10))["ack"] == 1
        calm.send(json.dumps(gpu_batch("gpu-a04-03", 2, ts=time.time() + 1)))
        assert json.loads(calm.recv(timeout=10))["ack"] == 2
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4403


def test_a_re_imaged_node_starting_its_seq_again_keeps_its_new_events(
    fleet_server: FleetServer,
) -> None:
    node = "gpu-a02-02"
    url = fleet_server.url + "/api/v1/ingest"
    for attempt in range(2):  # enrol, send seq 1 with an XID; re-image; the same again
        token = enroll(fleet_server, f"node:{node}")
        batch = gpu_batch(node, 1, ts=time.time() - 10 + attempt)
        batch["events"] = [{"ts": time.time() - 10 + attempt, "kind": "xid", "code": 79}]
        assert post_json(url, batch, token)[0] == 200
    stored = fleet_server.query(
        "SELECT count(*) FROM fleet_event WHERE source = ?", (f"node:{node}",)
    )
    assert stored[0][0] == 2


def test_the_clock_offset_an_agent_reports_is_kept_with_its_source(
    fleet_server: FleetServer,
) -> None:
    node = "gpu-a02-03"
    token = enroll(fleet_server, f"node:{node}")
    batch = gpu_batch(node, 1) | {"agent": {"clock_offset_s": -2.0, "clock_rtt_s": 0.001}}
    assert post_json(fleet_server.url + "/api/v1/ingest", batch, token)[0] == 200
    sql = "SELECT agent_stats FROM fleet_sourcetoken WHERE source = ? AND revoked = ?"
    deadline = time.monotonic() + 10
    stats: object = None
    while time.monotonic() < deadline:
        stats = fleet_server.query(sql, (f"node:{node}", False))[0][0]
        stats = json.loads(stats) if isinstance(stats, str) else stats
        if stats:
            break
        time.sleep(0.05)
    assert isinstance(stats, dict) and stats["clock_offset_s"] == -2.0


def test_a_node_token_cannot_grow_the_inventory_past_the_gpu_limit(
    fleet_server: FleetServer,
) -> None:
    """One batch describing 1,016 GPUs is refused; so is growing there a batch at a time."""
    from agents.protocol import MAX_GPUS_PER_NODE

    node = "gpu-a05-01"
    token = enroll(fleet_server, f"node:{node}")
    url = fleet_server.url + "/api/v1/ingest"

    def gpus() -> int:
        return int(
            fleet_server.query(
                "SELECT COUNT(*) FROM fleet_gpu g JOIN fleet_node n ON n.id = g.node_id"
                " WHERE n.name = ?",
                (node,),
            )[0][0]
        )

    before = gpus()
    huge = {"protocol": 1, "source": f"node:{node}", "seq": 1}
    huge["gpu_info"] = [{"gpu": i, "model": "X"} for i in range(1016)]
    status, body = post_json(url, huge, token)
    assert status == 400 and body["error"]["field"] == "gpu_info"
    assert f"at most {MAX_GPUS_PER_NODE}" in body["error"]["reason"]
    seq = 2
    grown = 0
    for start in range(0, 1024, 40):
        part = {"protocol": 1, "source": f"node:{node}", "seq": seq}
        part["gpu_info"] = [{"gpu": i, "model": "X"} for i in range(start, start + 40)]
        status, body = post_json(url, part, token)
        seq += 1
        if status != 200:
            assert status == 400 and "a node has at most" in body["error"]["reason"]
            break
        grown += 1
    assert grown >= 1
    assert gpus() <= MAX_GPUS_PER_NODE
    assert gpus() >= before
