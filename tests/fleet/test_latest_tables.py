"""On PostgreSQL the latest-state tables leave room on each page for in-place updates and
are vacuumed by a fixed number of dead rows: the per-second rewrite of every reporting
entity's row must not bloat them (docs/storage.md)."""

from __future__ import annotations

import pytest

from tests.support.server import FleetServer


def test_latest_tables_are_set_up_for_in_place_updates(fleet_server: FleetServer) -> None:
    if fleet_server.database_url is None:
        pytest.skip("a PostgreSQL setting; SQLite has nothing like it")
    rows = fleet_server.query(
        "SELECT relname, reloptions FROM pg_class WHERE relname LIKE 'fw_%%_latest'"
    )
    options = {name: set(opts or []) for name, opts in rows}
    assert set(options) == {
        f"fw_{kind}_latest" for kind in ("gpu", "node", "rack", "feed", "loop", "facility")
    }
    for name, opts in options.items():
        assert "fillfactor=50" in opts, name
        assert "autovacuum_vacuum_scale_factor=0.0" in opts, name
