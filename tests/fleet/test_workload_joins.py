"""A pod the agent has joined (its processes carry the allocation's names, the allocation
carries their UID: agents/attribution/joins.py) is one workload on the server, holding both
the scheduler's interval and its processes' interval."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

import pytest

from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.ingest.pipeline import IngestPipeline
from fleet.models import GpuAllocation, Node, Workload
from tests.support.latest import DjangoSqliteDb

pytestmark = pytest.mark.django_db

NODE = "gpu-a01-01"
NAMES = {"kind": "pod", "namespace": "ml", "pod": "trainer-0", "container": "train"}
CGROUP = {"kind": "pod", "pod_uid": "1f6a3c2e-9b4d-4e8a-a1c7-5d2f0e9b3a61", "container_id": "3b9f"}


def _store(allocation: dict[str, Any], owner: dict[str, Any]) -> None:
    """One batch from the node: GPU 0 allocated to `allocation`, one process of `owner`."""
    seed_demo_site("demo", (replace(DEMO_RACKS[0], nodes=1),), gpus_per_node=8)
    node = Node.objects.get(name=NODE)
    pipeline = IngestPipeline(DjangoSqliteDb(), save_interval_s=3600.0)
    pipeline.hello(1, f"node:{NODE}", node.rack.hall.site_id, "hash")
    process = {"pid": 4101, "memory_mib": 70_000.0, "sm_pct": 90.0, "owner": owner}
    entry = {"ts": time.time(), "gpu": 0, "allocation": allocation, "processes": [process]}
    batch = {"protocol": 1, "source": f"node:{NODE}", "seq": 1, "workloads": [entry]}
    [result] = pipeline.process([(1, json.dumps(batch).encode())], time.time())
    assert result.code == 0


def test_a_joined_pod_is_one_workload_with_its_allocation_and_its_processes() -> None:
    _store(NAMES | {"pod_uid": CGROUP["pod_uid"]}, CGROUP | NAMES)
    (workload,) = Workload.objects.all()
    assert workload.key == "ml/trainer-0"
    assert (workload.pod_uid, workload.container_id) == (CGROUP["pod_uid"], "3b9f")
    sources = sorted(a.source for a in GpuAllocation.objects.filter(workload=workload))
    assert sources == ["process", "scheduler"]


def test_unjoined_the_same_pod_is_two_workloads() -> None:
    """What the join is for: names on one side, the UID on the other, two keys."""
    _store(NAMES, CGROUP)
    keys = sorted(Workload.objects.values_list("key", flat=True))
    assert keys == [CGROUP["pod_uid"], "ml/trainer-0"]
