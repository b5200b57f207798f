"""Existing installations upgrade: latest state written in the old shape (one `ts` per
row) keeps its values after migration 0006, each with the row's time as its own."""

from __future__ import annotations

from fleet.storage.latest import rows_to_latest, select_latest_sql
from tests.support import databases
from tests.support.server import FleetServer

server = databases.unmigrated_server  # a server of the test's own, not started


def test_latest_state_of_an_existing_installation_survives_the_per_field_migration(
    server: FleetServer,
) -> None:
    server.var_dir.mkdir(parents=True, exist_ok=True)
    server.manage("migrate", "-v0", "fleet", "0005")
    server.execute(
        "INSERT INTO fw_gpu_latest (node_id, gpu, ts, temp_gpu_c, power_w) VALUES (?, ?, ?, ?, ?)",
        (7, 0, 1_800_000_000.0, 61.0, 450.5),
    )
    server.manage("migrate", "-v0")
    rows = rows_to_latest("gpu", server.query(select_latest_sql("gpu")))
    row = rows[(7, 0)]
    assert row.values == {"temp_gpu_c": 61.0, "power_w": 450.5}
    assert row.ts == {"temp_gpu_c": 1_800_000_000.0, "power_w": 1_800_000_000.0}
    assert row.newest == 1_800_000_000.0
    server.manage("migrate", "-v0", "fleet", "0005")  # and back, for a rollback
    assert server.query("SELECT temp_gpu_c, ts FROM fw_gpu_latest") == [(61.0, 1_800_000_000.0)]
