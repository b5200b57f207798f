from __future__ import annotations

import stat
from pathlib import Path

import pytest

from agents.spool import SEQ_BLOCK, Spool, SpoolSettings


def _fill(spool: Spool, count: int, size: int = 100) -> list[int]:
    seqs = []
    for _ in range(count):
        seq = spool.next_seq()
        spool.put(seq, b"x" * size)
        seqs.append(seq)
    return seqs


def test_spooled_batch_is_a_whole_private_file_on_disk(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    seq = spool.next_seq()
    spool.put(seq, b'{"seq": 0}')
    files = [p for p in tmp_path.iterdir() if p.name != "state.json"]
    assert [p.read_bytes() for p in files] == [b'{"seq": 0}']
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
    assert not list(tmp_path.glob("*.tmp"))


def test_acknowledged_batch_leaves_the_spool(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    first, second = _fill(spool, 2)
    spool.remove(first)
    assert spool.pending() == [second]
    assert spool.read(first) is None


def test_spool_drops_oldest_batch_when_full_and_counts_it(tmp_path: Path) -> None:
    spool = Spool(tmp_path, SpoolSettings(max_bytes=1000))
    seqs = _fill(spool, 15, size=100)
    assert spool.pending() == seqs[5:]
    assert spool.size_bytes <= 1000
    assert spool.dropped_batches == 5


def test_spool_bound_by_batch_count_keeps_the_newest(tmp_path: Path) -> None:
    spool = Spool(tmp_path, SpoolSettings(max_batches=3))
    seqs = _fill(spool, 5)
    assert spool.pending() == seqs[-3:]
    assert spool.dropped_batches == 2


def test_loss_counter_survives_a_restart(tmp_path: Path) -> None:
    spool = Spool(tmp_path, SpoolSettings(max_batches=2))
    _fill(spool, 4)
    assert Spool(tmp_path).dropped_batches == 2


def test_restarted_spool_keeps_pending_batches_and_never_reuses_a_seq(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    seqs = _fill(spool, 3)
    spool.remove(seqs[2])  # acked: no file left with the highest number
    reopened = Spool(tmp_path)
    assert reopened.pending() == seqs[:2]
    assert reopened.next_seq() > seqs[2]


def test_seq_keeps_rising_across_many_restarts_past_a_block(tmp_path: Path) -> None:
    seen: list[int] = []
    for _ in range(3):
        spool = Spool(tmp_path)
        for _ in range(SEQ_BLOCK + 5):
            seq = spool.next_seq()
            seen.append(seq)
    assert seen == sorted(set(seen))


def test_interrupted_write_is_discarded_on_start(tmp_path: Path) -> None:
    Spool(tmp_path)
    (tmp_path / "000000000007.tmp").write_bytes(b'{"half')
    spool = Spool(tmp_path)
    assert spool.pending() == []
    assert not list(tmp_path.glob("*.tmp"))


def test_a_full_disk_loses_that_batch_counts_it_and_the_agent_keeps_going(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    import orjson

    from agents.outbox import Outbox
    from agents.uplink import UplinkSettings
    from tests.support.agent_builders import node_reading

    settings = UplinkSettings(server="http://127.0.0.1:9", token="t", source="node:n1")
    outbox = Outbox("node:n1", tmp_path, settings, SpoolSettings(fsync=False))
    real_put = outbox.spool.put

    def disk_full(seq: int, payload: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(outbox.spool, "put", disk_full)
    lost = outbox.submit(node_reading())
    monkeypatch.setattr(outbox.spool, "put", real_put)
    kept = outbox.submit(node_reading())
    assert outbox.spool.pending() == [kept] and lost != kept
    sent = orjson.loads(outbox.spool.read(kept) or b"{}")
    assert sent["agent"]["dropped_batches"] == 1  # the loss is reported with the next batch
