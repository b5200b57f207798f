"""The refusal tally ("Refused input" in the admin) stays bounded however many sources
refused requests claim (issue 19: each unauthenticated request claiming a new source
added a row, without bound), and still counts every refusal: those of the rows it drops
are added to one "(older rows dropped)" row."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fleet.ingest import rejections, tally
from fleet.storage.db import Database, open_db
from fleetwatch.env import database_from_url
from tests.support.agent import gpu_batch, post_json
from tests.support.server import FleetServer

FLOOD = 10_000
OVER_HTTP = 400  # the rest go through `log_rejection`, the function the views call
FLUSH_EVERY = 2_000  # refusals between flushes: 400 a second at the flusher's 5 s


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> tally.Tally:
    """A tally of the test's own behind `log_rejection` (and a quiet log budget)."""
    fresh = tally.Tally()
    monkeypatch.setattr(rejections, "tally", fresh)
    monkeypatch.setattr(rejections, "_budget", rejections._Budget())
    return fresh


def refuse_claiming_new_sources(start: int, stop: int) -> Iterator[None]:
    """Refusals as the HTTP ingest view logs a bad token, each claiming a new source;
    yields after each one."""
    for i in range(start, stop):
        source = f"node:flood-{i:05d}"
        rejections.log_rejection(
            "HTTP ingest", "192.0.2.7", source, 401, "authorization", "unknown token"
        )
        yield


def test_a_process_keeps_a_bounded_number_of_keys_between_flushes(
    counts: tally.Tally,
) -> None:
    for _ in refuse_claiming_new_sources(0, FLOOD):
        pass
    waiting = counts.take()
    assert len(waiting) == tally.MAX_KEYS + 1  # the sources, and one overflow key
    overflow = waiting[(tally.OVERFLOW_SOURCE, "HTTP ingest", 401, "")]
    assert overflow.count == FLOOD - tally.MAX_KEYS
    assert sum(c.count for c in waiting.values()) == FLOOD


def server_db(server: FleetServer) -> Database:
    if server.database_url:
        return open_db(database_from_url(server.database_url))
    return open_db({"ENGINE": "sqlite3", "NAME": str(server.var_dir / "fleetwatch.sqlite3")})


def tally_rows(server: FleetServer) -> tuple[int, int, int]:
    """(rows besides the dropped row, refusals counted in all rows, refusals dropped)."""
    source, transport = tally.DROPPED_KEY[:2]
    [(rows, total)] = server.query(
        "SELECT count(*), coalesce(sum(count), 0) FROM fleet_rejectiontally"
        " WHERE NOT (source = ? AND transport = ?)",
        (source, transport),
    )
    dropped = server.query(
        "SELECT count FROM fleet_rejectiontally WHERE source = ? AND transport = ?",
        (source, transport),
    )
    lost = int(dropped[0][0]) if dropped else 0
    return int(rows), int(total) + lost, lost


PROBE_ROW = "SELECT 1 FROM fleet_rejectiontally WHERE transport = 'inventory'"


def wait_for(condition: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    """The server's flusher adds its counts every FLUSH_EVERY_S."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout:g} s for {what}"
        time.sleep(0.2)


def test_ten_thousand_refusals_claiming_new_sources_leave_the_tally_within_its_bound(
    fleet_server: FleetServer, counts: tally.Tally
) -> None:
    # The server's start-up probe (GET /api/v1/inventory, no token) was refused too.
    wait_for(lambda: fleet_server.query(PROBE_ROW), "the start-up probe's refusals")
    before = tally_rows(fleet_server)[1]
    url = fleet_server.url + "/api/v1/ingest"
    for i in range(OVER_HTTP):  # no token: refused 401, the body's source logged
        status, _ = post_json(url, gpu_batch(f"flood-{i:05d}", 1, gpus=1))
        assert status == 401
    wait_for(lambda: tally_rows(fleet_server)[1] == before + OVER_HTTP, "the HTTP refusals")
    db = server_db(fleet_server)
    try:
        for n, _ in enumerate(refuse_claiming_new_sources(OVER_HTTP, FLOOD), start=1):
            assert len(counts) <= tally.MAX_KEYS + 1
            if n % FLUSH_EVERY == 0:
                counts.flush(db)
        counts.flush(db)
    finally:
        db.close()
    rows, total, dropped = tally_rows(fleet_server)
    assert rows <= tally.MAX_ROWS
    assert dropped > 0 and total == before + FLOOD  # every refusal counted, kept or dropped
    kept = {row[0] for row in fleet_server.query("SELECT source FROM fleet_rejectiontally")}
    assert not any(f"node:flood-{i:05d}" in kept for i in range(OVER_HTTP))  # oldest went first
    last_flush_from = OVER_HTTP + (FLOOD - OVER_HTTP - 1) // FLUSH_EVERY * FLUSH_EVERY
    assert f"node:flood-{last_flush_from:05d}" in kept  # the newest stay


@pytest.mark.django_db
def test_the_admin_shows_the_refusals_of_dropped_rows(admin_client: Any) -> None:
    counts = tally.Tally()
    for batch in range(3):  # three flushes of MAX_KEYS new sources each
        for i in range(tally.MAX_KEYS):
            counts.add(f"node:n{batch}-{i}", "enrolment", 404, "source", "not found", "10.0.0.1")
        counts.flush()
    from fleet.models import RejectionTally

    dropped = RejectionTally.objects.get(source=tally.DROPPED_KEY[0])
    assert dropped.count == 3 * tally.MAX_KEYS - tally.MAX_ROWS
    assert RejectionTally.objects.count() == tally.MAX_ROWS + 1
    page = admin_client.get("/admin/fleet/rejectiontally/").content.decode()
    assert "(older rows dropped)" in page and f"{tally.MAX_ROWS:,} rows" in page
