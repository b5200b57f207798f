from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from agents.outbox import Outbox
from agents.protocol.validate import validate_batch
from agents.spool import SpoolSettings
from agents.uplink import UplinkSettings
from tests.support.agent_builders import make_outbox, node_reading
from tests.support.stub_server import StubBackend, wait_for


async def _submit_ticks(outbox: Outbox, count: int, start: float) -> None:
    for i in range(count):
        outbox.submit(node_reading(ts=start + i))
        await asyncio.sleep(0)


async def test_batches_reach_the_server_and_leave_the_spool(
    backend: StubBackend, tmp_path: Path
) -> None:
    outbox = make_outbox(backend, tmp_path)
    outbox.start()
    await _submit_ticks(outbox, 5, time.time() - 10)
    assert await outbox.uplink.flush(10)
    await outbox.close(1)
    assert backend.store.count("gpu") == 10
    assert len(outbox.spool) == 0
    for batch in backend.store.batches:
        validate_batch(batch, time.time())


async def test_backend_down_then_up_stores_every_sample_exactly_once(
    backend: StubBackend, tmp_path: Path
) -> None:
    outbox = make_outbox(backend, tmp_path)
    outbox.start()
    start = time.time() - 100
    await _submit_ticks(outbox, 3, start)
    assert await wait_for(lambda: backend.store.count("node") == 3)
    backend.drop_acks = 2  # the next two batches are stored but their acks are lost
    await _submit_ticks(outbox, 2, start + 3)
    assert await wait_for(lambda: backend.store.count("node") == 5)
    backend.stop()
    await _submit_ticks(outbox, 10, start + 5)  # spooled while the backend is down
    assert len(outbox.spool) >= 10
    backend.start()
    assert await outbox.uplink.flush(15)
    await outbox.close(1)
    assert backend.store.count("node") == 15
    assert backend.store.count("gpu") == 30
    resent = [key for key, n in backend.store.deliveries.items() if n > 1]
    assert len(resent) >= 2 * 3  # the two unacknowledged batches really came twice
    node_times = sorted(k[-1] for k in backend.store.samples if k[0] == "node")
    assert node_times == [start + i for i in range(15)]


async def test_restarted_agent_sends_what_its_last_run_spooled(
    backend: StubBackend, tmp_path: Path
) -> None:
    backend.stop()
    first_run = make_outbox(backend, tmp_path)
    first_run.start()
    await _submit_ticks(first_run, 4, time.time() - 50)
    await first_run.close(flush_timeout_s=0.1)
    assert len(first_run.spool) == 4
    backend.start()
    token = next(t for t, s in backend.tokens.items() if s == "node:gpu-a01-01")
    second_run = make_outbox(backend, tmp_path, token=token)
    second_run.start()
    second_run.submit(node_reading(ts=time.time()))
    assert await second_run.uplink.flush(10)
    await second_run.close(1)
    assert backend.store.count("node") == 5
    seqs = [b["seq"] for b in backend.store.batches]
    assert len(set(seqs)) == 5 and seqs[-1] == max(seqs)


async def test_loss_from_a_full_spool_is_reported_when_the_link_returns(
    backend: StubBackend, tmp_path: Path
) -> None:
    from agents.spool import SpoolSettings

    backend.stop()
    outbox = make_outbox(backend, tmp_path, spool=SpoolSettings(max_batches=3, fsync=False))
    outbox.start()
    await _submit_ticks(outbox, 8, time.time() - 50)
    backend.start()
    outbox.submit(node_reading())
    assert await outbox.uplink.flush(10)
    await outbox.close(1)
    assert backend.store.batches[-1]["agent"]["dropped_batches"] == 6
    assert backend.store.count("node") == 3


async def test_refused_batch_is_dropped_not_resent_forever(
    backend: StubBackend, tmp_path: Path
) -> None:
    backend.nack_next = 1
    outbox = make_outbox(backend, tmp_path)
    outbox.start()
    await _submit_ticks(outbox, 2, time.time() - 5)
    assert await outbox.uplink.flush(10)
    await outbox.close(1)
    assert outbox.uplink.stats.nacked == 1
    assert backend.store.count("node") == 1


async def test_http_fallback_delivers_when_websockets_are_blocked(
    backend: StubBackend, tmp_path: Path
) -> None:
    backend.websocket_enabled = False
    outbox = make_outbox(backend, tmp_path, ws_failures_before_http=1)
    outbox.start()
    await _submit_ticks(outbox, 3, time.time() - 5)
    assert await outbox.uplink.flush(10)
    await outbox.close(1)
    assert backend.store.count("node") == 3
    assert outbox.uplink.stats.http_posts >= 3


async def test_revoked_token_stops_the_uplink_with_a_reason(
    backend: StubBackend, tmp_path: Path
) -> None:
    outbox = make_outbox(backend, tmp_path, token="fwn_not_a_real_token")
    outbox.start()
    outbox.submit(node_reading())
    assert await wait_for(lambda: outbox.rejected is not None)
    await outbox.close(0.1)
    assert "4401" in (outbox.rejected or "")
    assert len(outbox.spool) == 1  # kept for after re-enrolment


async def test_batch_for_another_source_is_refused_with_close_4403(
    backend: StubBackend, tmp_path: Path
) -> None:
    token = backend.enroll("node:gpu-a01-02")
    outbox = make_outbox(backend, tmp_path, token=token)
    outbox.start()
    outbox.submit(node_reading())
    assert await wait_for(lambda: outbox.rejected is not None)
    await outbox.close(0.1)
    assert "another source" in (outbox.rejected or "")
    assert backend.store.count("node") == 0


async def test_http_fallback_with_a_revoked_token_stops_with_a_reason(
    backend: StubBackend, tmp_path: Path
) -> None:
    backend.websocket_enabled = False
    outbox = make_outbox(backend, tmp_path, token="fwn_revoked", ws_failures_before_http=1)
    outbox.start()
    outbox.submit(node_reading())
    assert await wait_for(lambda: outbox.rejected is not None)
    await outbox.close(0.1)
    assert "401" in (outbox.rejected or "")


async def test_a_spool_that_cannot_be_written_loses_the_batch_but_not_the_agent(
    backend: StubBackend, tmp_path: Path
) -> None:
    outbox = make_outbox(backend, tmp_path / "spool")
    outbox.start()
    spool_dir = tmp_path / "spool"
    spool_dir.rename(tmp_path / "moved")
    spool_dir.write_text("not a directory")  # every write fails, even as root
    try:
        outbox.submit(node_reading())
    finally:
        spool_dir.unlink()
        (tmp_path / "moved").rename(spool_dir)
    outbox.submit(node_reading(ts=time.time() + 1))
    assert await outbox.uplink.flush(10)
    await outbox.close(1)
    assert backend.store.batches[-1]["agent"]["dropped_batches"] == 1


async def _deliver_one_by_one(outbox: Outbox, count: int) -> None:
    """Each batch after the previous one's ack, so later batches carry what acks measured."""
    for i in range(count):
        outbox.submit(node_reading(ts=time.time() - count + i))
        assert await outbox.uplink.flush(10)  # acknowledged: the ack has been read


@pytest.mark.parametrize("transport", ["websocket", "http"])
async def test_the_servers_clock_offset_is_measured_from_its_acks_and_reported(
    backend: StubBackend, tmp_path: Path, transport: str
) -> None:
    backend.clock_skew_s = 42.5  # the server's clock is 42.5 s ahead of ours
    backend.websocket_enabled = transport == "websocket"
    outbox = make_outbox(backend, tmp_path, ws_failures_before_http=1)
    outbox.start()
    await _deliver_one_by_one(outbox, 4)
    await outbox.close(1)
    measured = outbox.clock_offset.best()
    assert measured is not None
    # Loopback: the round trip, and so the error (at most half of it), is milliseconds.
    assert abs(measured.offset_s - 42.5) <= measured.rtt_s / 2 + 0.005
    first, last = backend.store.batches[0]["agent"], backend.store.batches[-1]["agent"]
    assert "clock_offset_s" not in first  # nothing measured before the first ack
    assert abs(last["clock_offset_s"] - 42.5) < 0.1
    assert 0 <= last["clock_rtt_s"] < 2
    if transport == "http":
        assert outbox.uplink.stats.http_posts >= 4


async def test_a_server_clock_behind_ours_is_a_negative_offset(
    backend: StubBackend, tmp_path: Path
) -> None:
    backend.clock_skew_s = -7.25
    outbox = make_outbox(backend, tmp_path)
    outbox.start()
    await _deliver_one_by_one(outbox, 2)
    await outbox.close(1)
    assert abs(backend.store.batches[-1]["agent"]["clock_offset_s"] + 7.25) < 0.1


async def test_acks_without_the_servers_time_still_settle_batches(
    backend: StubBackend, tmp_path: Path
) -> None:
    assert backend.clock_skew_s is None  # an older server: plain {"ack": seq}
    outbox = make_outbox(backend, tmp_path)
    outbox.start()
    await _deliver_one_by_one(outbox, 3)
    await outbox.close(1)
    assert outbox.uplink.stats.acked == 3 and len(outbox.spool) == 0
    assert outbox.clock_offset.best() is None
    assert all("clock_offset_s" not in b["agent"] for b in backend.store.batches)


async def test_a_nack_carrying_the_servers_time_measures_the_offset_too(
    backend: StubBackend, tmp_path: Path
) -> None:
    backend.clock_skew_s = 10.0
    backend.nack_next = 1
    outbox = make_outbox(backend, tmp_path)
    outbox.start()
    outbox.submit(node_reading())
    assert await outbox.uplink.flush(10)
    await outbox.close(1)
    assert outbox.uplink.stats.nacked == 1
    measured = outbox.clock_offset.best()
    assert measured is not None and abs(measured.offset_s - 10.0) < 0.1


async def test_sent_at_is_when_the_batch_was_spooled_by_the_outboxs_clock(
    backend: StubBackend, tmp_path: Path
) -> None:
    source = "node:gpu-a01-01"
    settings = UplinkSettings(server=backend.url, token=backend.enroll(source), source=source)

    def agent_clock() -> float:  # what the agent's AgentClock says when the batch is built
        return 1_795_996_288.1234

    outbox = Outbox(source, tmp_path, settings, SpoolSettings(fsync=False), clock=agent_clock)
    outbox.start()
    outbox.submit(node_reading())
    assert await outbox.uplink.flush(10)
    await outbox.close(1)
    assert backend.store.batches[0]["sent_at"] == 1_795_996_288.123
