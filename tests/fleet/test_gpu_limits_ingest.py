"""An agent never erases a limit entered in the inventory (issue 20): a `gpu_info` without
limits, sent over real HTTP to a real server after `import_inventory` set them, leaves them
and the headroom measured against them as they were; what the agent reports is kept beside
them, on every tier."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.support.agent import enroll, gpu_batch, post_json
from tests.support.server import METRICS_TOKEN, FleetServer
from tests.support.waiting import wait_until

INVENTORY = """
sites:
  - slug: demo
    name: Demo datacentre
    halls:
      - name: Hall A
        racks:
          - name: L01
            power_budget_kw: 40
            nodes:
              - name: {node}
                gpus: {{count: 2, model: NVIDIA H200, slowdown_c: 85, shutdown_c: 90}}
"""
LIMITS = (
    "slowdown_c, shutdown_c, reported_slowdown_c, reported_shutdown_c, reported_power_limit_max_w"
)


def import_node(server: FleetServer, tmp_path: Path, node: str) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(INVENTORY.format(node=node))
    server.manage("import_inventory", str(path))


def stored_limits(server: FleetServer, node: str, index: int) -> tuple[Any, ...]:
    rows = server.query(
        f"SELECT {LIMITS} FROM fleet_gpu g JOIN fleet_node n ON n.id = g.node_id"
        ' WHERE n.name = ? AND g."index" = ?',
        (node, index),
    )
    return tuple(rows[0])


def send(server: FleetServer, token: str, batch: dict[str, Any]) -> None:
    """Sent as an agent sends: resent while the server answers 503 (a node imported moments
    ago, before the ingest child's next read of the inventory)."""

    def answered() -> tuple[int, Any] | None:
        status, body = post_json(server.url + "/api/v1/ingest", batch, token)
        return None if status == 503 else (status, body)

    answer = wait_until(answered, 10, "an answer other than 503", every=0.2)
    assert answer is not None
    status, body = answer
    assert status == 200 and "refused" not in body, body


def headroom_c(server: FleetServer, node: str, index: int) -> float | None:
    """The slowdown headroom /metrics exports for the GPU (None: not exported)."""
    request = urllib.request.Request(
        server.url + "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name == "fleetwatch_gpu_slowdown_headroom_celsius"
                and labels.get("node") == node
                and labels.get("gpu") == str(index)
            ):
                return float(sample.value)
    return None


def test_gpu_info_without_limits_leaves_the_inventorys_limits_and_headroom(
    fleet_server: FleetServer, tmp_path: Path
) -> None:
    node = "gpu-l01-01"
    import_node(fleet_server, tmp_path, node)
    token = enroll(fleet_server, f"node:{node}")
    batch = gpu_batch(node, 1, gpus=2, temp_gpu_c=80)
    batch["gpu_info"] = [{"gpu": i, "uuid": f"GPU-l01-{i}", "model": "NVIDIA H200"} for i in (0, 1)]
    send(fleet_server, token, batch)
    assert stored_limits(fleet_server, node, 0) == (85.0, 90.0, None, None, None)
    wait_until(lambda: headroom_c(fleet_server, node, 0) == 5.0, 10, "headroom 85 − 80 °C")


def test_reported_limits_are_kept_beside_the_inventorys_and_not_erased_by_a_later_gpu_info(
    fleet_server: FleetServer, tmp_path: Path
) -> None:
    node = "gpu-l01-02"
    import_node(fleet_server, tmp_path, node)
    token = enroll(fleet_server, f"node:{node}")
    reported = {"slowdown_c": 89, "shutdown_c": 95, "power_limit_max_w": 700}
    batch = gpu_batch(node, 1, gpus=2, temp_gpu_c=80)
    batch["gpu_info"] = [{"gpu": 0, "uuid": "GPU-l01-a", "limits": reported}]
    send(fleet_server, token, batch)
    assert stored_limits(fleet_server, node, 0) == (85.0, 90.0, 89.0, 95.0, 700.0)
    wait_until(lambda: headroom_c(fleet_server, node, 0) == 5.0, 10, "the inventory's 85 °C")
    # The agent restarts on a driver that cannot read the limits: nothing is erased.
    again = {"protocol": 1, "source": f"node:{node}", "seq": 2}
    again["gpu_info"] = [{"gpu": 0, "uuid": "GPU-l01-a"}]
    send(fleet_server, token, again)
    assert stored_limits(fleet_server, node, 0) == (85.0, 90.0, 89.0, 95.0, 700.0)
    # Another device in the slot (a new UUID) has its own limits, not the last one's.
    swapped = {"protocol": 1, "source": f"node:{node}", "seq": 3}
    swapped["gpu_info"] = [{"gpu": 0, "uuid": "GPU-l01-b", "limits": {"slowdown_c": 87}}]
    send(fleet_server, token, swapped)
    assert stored_limits(fleet_server, node, 0) == (85.0, 90.0, 87.0, None, None)


def test_a_reported_limit_is_in_force_where_the_inventory_has_none(
    fleet_server: FleetServer, tmp_path: Path
) -> None:
    node = "gpu-l01-03"
    import_node(fleet_server, tmp_path, node)
    fleet_server.execute(
        "UPDATE fleet_gpu SET slowdown_c = NULL"
        " WHERE node_id = (SELECT id FROM fleet_node WHERE name = ?)",
        (node,),
    )
    token = enroll(fleet_server, f"node:{node}")
    batch = gpu_batch(node, int(time.time()), gpus=2, temp_gpu_c=80)
    batch["gpu_info"] = [{"gpu": 0, "limits": {"slowdown_c": 89}}]
    send(fleet_server, token, batch)
    wait_until(lambda: headroom_c(fleet_server, node, 0) == 9.0, 10, "the agent's 89 °C")
    assert headroom_c(fleet_server, node, 1) is None  # neither source: not exported
