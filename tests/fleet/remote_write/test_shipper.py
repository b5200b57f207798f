"""The remote-write shipper (fleet/remote_write/ship.py) against a loopback receiver that
answers what each test sets, on both database tiers: what it ships (settled rows only, each
once, bounded labels), and what each answer does to its cursor (2xx moves it; 400 drops and
counts; 5xx keeps it and backs off)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from fleet.models import Node, RemoteWriteCursor
from fleet.remote_write import series, ship
from fleet.remote_write.lag import lag_words
from fleet.remote_write.ship import backoff_s, ship_pass
from fleet.storage.rollups import rollup_all
from fleetwatch.remote_write_settings import RemoteWrite
from tests.support import databases, prompb
from tests.support.databases import TierDb
from tests.support.remote_write import StatusReceiver, small_site, store, store_gpu_seconds

db = databases.fresh_tier_db  # each test's own database, both tiers

BASE = int(time.time() // 60 * 60) - 3600  # an hour ago, on a minute
GPUS = 2
FIELDS_PER_GPU_ROW = 2  # temperature and power
NOW = BASE + 330  # the 1-minute rollup settles [BASE, BASE + 300)


@pytest.fixture
def receiver() -> Iterator[StatusReceiver]:
    stub = StatusReceiver(204)
    yield stub
    stub.close()


def config(receiver: StatusReceiver, batch: int = 2000) -> RemoteWrite:
    return RemoteWrite(url=receiver.url, batch_samples=batch)


def received(receiver: StatusReceiver) -> list[tuple[dict[str, str], list[tuple[int, float]]]]:
    return [
        (dict(labels), samples)
        for exchange in receiver.received
        for labels, samples in prompb.decode(exchange.body)
    ]


def seeded(db: TierDb, seconds: int = 300) -> int:
    """Five minutes of one node's two GPUs every 5 s, rolled up: GPU rows stored."""
    place = small_site(db.alias, GPUS)
    rows = store_gpu_seconds(db.alias, place.node.pk, GPUS, BASE, BASE + seconds, 5)
    rollup_all(NOW, using=db.alias)
    return rows


def cursor(db: TierDb, kind: str) -> RemoteWriteCursor:
    return RemoteWriteCursor.objects.using(db.alias).get(kind=kind)


# Reads of a thousand rows (whole windows), and of seven (each window cut by the limit).
@pytest.mark.parametrize("rows_per_read", [1000, 7])
def test_every_settled_sample_is_shipped_once_with_its_value_in_series_order(
    db: TierDb, receiver: StatusReceiver, rows_per_read: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ship, "ROWS_PER_READ", rows_per_read)
    rows = seeded(db)

    result = ship_pass(NOW, config(receiver, batch=50), using=db.alias)

    assert result.failed is None and result.requests > 1  # several requests of ~50 samples
    temps = [
        (labels, samples)
        for labels, samples in received(receiver)
        if labels["__name__"] == "fleetwatch_raw_gpu_temp_gpu_c"
    ]
    by_gpu: dict[str, list[tuple[int, float]]] = {}
    for labels, samples in temps:
        by_gpu.setdefault(labels["gpu"], []).extend(samples)
    assert sorted(by_gpu) == ["0", "1"]
    for samples in by_gpu.values():
        assert [t for t, _ in samples] == [t * 1000 for t in range(BASE, BASE + 300, 5)]
        assert samples == sorted(samples)  # each series in time order, across requests
    assert result.shipped["gpu"] == rows * FIELDS_PER_GPU_ROW
    assert cursor(db, "gpu").shipped_samples == rows * FIELDS_PER_GPU_ROW

    again = ship_pass(NOW + 5, config(receiver), using=db.alias)
    assert again.shipped == {} and again.requests == 0  # nothing twice


def test_rows_the_rollup_has_not_settled_wait_for_it(db: TierDb, receiver: StatusReceiver) -> None:
    place = small_site(db.alias, GPUS)
    store_gpu_seconds(db.alias, place.node.pk, GPUS, BASE, BASE + 120, 5)
    rollup_all(BASE + 70, using=db.alias)  # settles the first minute only

    ship_pass(BASE + 70, config(receiver), using=db.alias)

    times = {t for _, samples in received(receiver) for t, _ in samples}
    assert max(times) == (BASE + 55) * 1000
    assert cursor(db, "gpu").complete_until == BASE + 60


def test_everything_shipped_carries_only_bounded_labels(
    db: TierDb, receiver: StatusReceiver
) -> None:
    seeded(db)

    ship_pass(NOW, config(receiver), using=db.alias)

    shipped = received(receiver)
    assert {labels["__name__"] for labels, _ in shipped} == {
        "fleetwatch_raw_gpu_temp_gpu_c",
        "fleetwatch_raw_gpu_power_w",
        "fleetwatch_raw_node_cpu_pct",
    }
    names = {name for labels, _ in shipped for name in labels}
    assert names <= series.ALLOWED_LABELS
    gpu = next(
        labels for labels, _ in shipped if labels["__name__"].startswith(series.PREFIX + "gpu")
    )
    assert set(gpu) == {"__name__", "site", "rack", "node", "gpu", "uuid"}
    assert (gpu["site"], gpu["rack"], gpu["node"]) == ("lab", "A01", "gpu-a01-01")
    assert gpu["uuid"] == f"GPU-{gpu['gpu']}"


def test_a_400_drops_and_counts_the_samples_and_never_sends_them_again(
    db: TierDb, receiver: StatusReceiver
) -> None:
    rows = seeded(db)
    receiver.status = 400

    result = ship_pass(NOW, config(receiver), using=db.alias)
    sent = len(receiver.received)
    again = ship_pass(NOW + 5, config(receiver), using=db.alias)

    gpu = cursor(db, "gpu")
    assert result.failed is None
    assert gpu.dropped_samples == rows * FIELDS_PER_GPU_ROW and gpu.shipped_samples == 0
    assert gpu.complete_until == BASE + 300  # moved past them
    assert gpu.last_error.startswith("400")
    assert again.requests == 0 and len(receiver.received) == sent


@pytest.mark.parametrize("status", [503, 429])
def test_a_retriable_answer_keeps_the_cursor_and_backs_off_then_resumes(
    db: TierDb, receiver: StatusReceiver, status: int
) -> None:
    rows = seeded(db)
    receiver.status = status

    failed = ship_pass(NOW, config(receiver), using=db.alias)

    gpu = cursor(db, "gpu")
    assert failed.failed is not None and failed.failed.startswith(str(status))
    assert gpu.ts is None and gpu.complete_until == BASE  # where it was
    assert gpu.failures == 1 and gpu.retry_at == NOW + backoff_s(1, 5.0)
    waiting = ship_pass(NOW + 1, config(receiver), using=db.alias)
    assert waiting.backing_off and len(receiver.received) == 1

    receiver.status = 204
    receiver.received.clear()
    resumed = ship_pass(NOW + 10, config(receiver), using=db.alias)

    assert resumed.failed is None
    assert resumed.shipped["gpu"] == rows * FIELDS_PER_GPU_ROW
    assert cursor(db, "gpu").failures == 0
    temps = [s for labels, s in received(receiver) if labels["__name__"].endswith("temp_gpu_c")]
    assert sum(len(s) for s in temps) == rows  # each once


def test_a_receiver_back_clears_the_failure_of_kinds_with_nothing_new(
    db: TierDb, receiver: StatusReceiver, settings: Any
) -> None:
    settings.REMOTE_WRITE = config(receiver)
    seeded(db)
    ship_pass(NOW, config(receiver), using=db.alias)  # everything so far shipped
    node_id = Node.objects.using(db.alias).get().pk
    store(db.alias, "gpu", [((node_id, 0), {"ts": float(BASE + 300), "power_w": 1.0})])
    rollup_all(NOW + 60, using=db.alias)
    receiver.status = 503
    ship_pass(NOW + 60, config(receiver), using=db.alias)
    assert cursor(db, "node").failures == 1  # every kind's cursor holds the failure

    receiver.status = 204
    ship_pass(NOW + 120, config(receiver), using=db.alias)

    assert cursor(db, "node").failures == 0 and cursor(db, "node").last_error == ""
    text, _ = lag_words(NOW + 120, using=db.alias) or ("", "")
    assert "failing" not in text


def test_a_second_pass_while_one_runs_sends_nothing(db: TierDb, receiver: StatusReceiver) -> None:
    if db.vendor != "postgresql":
        pytest.skip("the embedded tier runs one maintenance worker process: no lock to take")
    import psycopg

    seeded(db)
    assert db.url is not None
    with psycopg.connect(db.url.replace("postgres://", "postgresql://", 1)) as other:
        other.execute("SELECT pg_advisory_lock(%s)", [ship._LOCK_KEY])  # a pass running

        second = ship_pass(NOW, config(receiver), using=db.alias)
        # Released here, not by closing: a closed connection's backend lets its locks go
        # as it exits, a moment after the client has gone.
        other.execute("SELECT pg_advisory_unlock(%s)", [ship._LOCK_KEY])

    assert second.overlapped and second.requests == 0 and receiver.received == []
    assert ship_pass(NOW, config(receiver), using=db.alias).requests > 0  # once it ended


def test_the_kind_furthest_behind_goes_first(db: TierDb, receiver: StatusReceiver) -> None:
    seeded(db)
    cursors = RemoteWriteCursor.objects.using(db.alias)
    cursors.create(kind="gpu", complete_until=BASE + 200)  # GPUs ahead
    cursors.create(kind="node", complete_until=BASE)

    ship_pass(NOW, config(receiver), using=db.alias)

    names = [labels["__name__"] for labels, _ in received(receiver)]
    assert names[0] == "fleetwatch_raw_node_cpu_pct"
    assert names[-1].startswith("fleetwatch_raw_gpu_")


def test_backoff_doubles_from_the_beat_interval_to_a_minute() -> None:
    assert [backoff_s(n, 5.0) for n in range(1, 7)] == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0]


def test_nothing_ships_while_remote_write_is_off(db: TierDb) -> None:
    seeded(db)

    result = ship_pass(NOW, RemoteWrite(), using=db.alias)

    assert result.requests == 0
    assert not RemoteWriteCursor.objects.using(db.alias).exists()


def test_a_pass_that_dies_between_a_stored_request_and_its_cursor_resends_it_and_loses_nothing(
    db: TierDb, receiver: StatusReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker is killed (or its database goes away) after the receiver stored a request
    # and before the cursor moved past it: the next pass starts from the cursor, so that
    # request goes again (the receiver takes the exact duplicate) and nothing is skipped.
    rows = seeded(db)
    save = ship._save

    def dies(*args: Any, **changes: Any) -> bool:
        raise ConnectionError("the database went away")

    monkeypatch.setattr(ship, "_save", dies)
    with pytest.raises(ConnectionError):
        ship_pass(NOW, config(receiver, batch=50), using=db.alias)
    assert len(receiver.received) == 1 and cursor(db, "gpu").ts is None
    first = received(receiver)

    monkeypatch.setattr(ship, "_save", save)
    receiver.received.clear()
    resumed = ship_pass(NOW + 10, config(receiver, batch=50), using=db.alias)

    assert resumed.failed is None and resumed.shipped["gpu"] == rows * FIELDS_PER_GPU_ROW
    assert received(receiver)[: len(first)] == first  # the stored request, sent again
    temps = [s for labels, s in received(receiver) if labels["__name__"].endswith("temp_gpu_c")]
    assert sorted(t for s in temps for t, _ in s) == sorted(
        t * 1000 for t in range(BASE, BASE + 300, 5) for _ in range(GPUS)
    )  # every sample, each once after the resend


def test_a_configured_tenant_rides_with_every_request(db: TierDb, receiver: StatusReceiver) -> None:
    # Grafana Mimir (multi-tenant by default) takes a write only with its tenant's header.
    seeded(db)
    tenant = RemoteWrite(url=receiver.url, batch_samples=50, tenant="gpu-fleet")

    ship_pass(NOW, tenant, using=db.alias)

    assert len(receiver.received) > 1
    assert {e.headers.get("X-Scope-OrgID") for e in receiver.received} == {"gpu-fleet"}
