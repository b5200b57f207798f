"""Migration fleet 0020 splits each GPU limit into the value entered and the value the agent
reported, keeping every limit in force as it was: a value the agent did not report, or that
differs from its report, stays entered; one equal to its report is the agent's. Back, each
column holds the value in force again. On every tier."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import services
from tests.support.server import FleetServer

COLUMNS = "slowdown_c, reported_slowdown_c, power_limit_max_w, reported_power_limit_max_w"


@pytest.fixture
def server(tier: str, tmp_path: Path) -> Iterator[FleetServer]:
    name = None
    url = None
    if tier == "services":
        name = f"fwtest_{uuid.uuid4().hex[:10]}"
        url = services.create_database(services.services_database_url(), name)
    try:
        yield FleetServer(tmp_path, database_url=url, racks=1)
    finally:
        if name:
            services.drop_database(services.services_database_url(), name)


def test_the_split_keeps_every_limit_in_force_and_each_value_with_its_writer(
    server: FleetServer,
) -> None:
    server.prepare()  # migrated to the newest, one seeded rack: its GPUs
    server.manage("migrate", "-v0", "fleet", "0019")
    first, second, third = (r[0] for r in server.query("SELECT id FROM fleet_gpu ORDER BY id")[:3])
    shared = "UPDATE fleet_gpu SET slowdown_c = ?, power_limit_max_w = ?, info = ? WHERE id = ?"
    agent = {"uuid": "GPU-1", "limits": {"slowdown_c": 89, "power_limit_max_w": 700}}
    # entered in the inventory, the agent never reported limits
    server.execute(shared, (85.0, None, json.dumps({}), first))
    # the agent's own report, as it wrote it last
    server.execute(shared, (89.0, 700.0, json.dumps(agent), second))
    # entered after the agent reported another slowdown
    server.execute(shared, (85.0, 700.0, json.dumps(agent), third))
    server.manage("migrate", "-v0")

    def limits(gpu_id: int) -> tuple[object, ...]:
        return tuple(server.query(f"SELECT {COLUMNS} FROM fleet_gpu WHERE id = ?", (gpu_id,))[0])

    assert limits(first) == (85.0, None, None, None)
    assert limits(second) == (None, 89.0, None, 700.0)
    assert limits(third) == (85.0, 89.0, None, 700.0)
    server.manage("migrate", "-v0", "fleet", "0019")  # and back, for a rollback
    back = "SELECT slowdown_c, power_limit_max_w FROM fleet_gpu WHERE id = ?"
    assert server.query(back, (second,)) == [(89.0, 700.0)]
    assert server.query(back, (third,)) == [(85.0, 700.0)]
