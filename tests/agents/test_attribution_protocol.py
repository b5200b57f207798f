"""The `workloads` part on the wire: what the validator accepts and how it names a fault."""

from __future__ import annotations

import copy
import time
from typing import Any

import jsonschema
import pytest

from agents.protocol.schema import batch_schema
from agents.protocol.validate import ProtocolError, validate_batch

NOW = time.time()
POD = {"kind": "pod", "pod_uid": "1f6a3c2e-9b4d-4e8a-a1c7-5d2f0e9b3a61", "container_id": "3b9f"}


def _batch(workloads: Any, source: str = "node:gpu-a01-01") -> dict[str, Any]:
    return {"protocol": 1, "source": source, "seq": 1, "workloads": workloads}


def _workloads() -> list[dict[str, Any]]:
    return [
        {
            "ts": NOW,
            "gpu": 0,
            "allocation": {"kind": "pod", "namespace": "ml", "pod": "trainer-0", "container": "t"},
            "processes": [
                {"pid": 4101, "memory_mib": 70123.5, "sm_pct": 97.5, "owner": POD},
                {"pid": 4102, "sm_pct": 0, "owner": {"kind": "user", "uid": 0, "user": "root"}},
            ],
        },
        {"ts": NOW, "gpu": 1, "allocation": {"kind": "slurm", "job": "4242"}, "processes": []},
        {
            "ts": NOW,
            "gpu": 2,
            "mig": "MIG-00000002-0000-4000-8000-000000000000",
            "allocation": None,
            "processes": [
                {
                    "pid": 4111,
                    "memory_mib": 4096,
                    "sm_pct": None,
                    "owner": {"kind": "slurm", "job": "sEKNKTV3WPV500", "step": "0+1"},
                },
                {"pid": 4107, "sm_pct": None, "owner": {"kind": "container", "container_id": "9e"}},
            ],
        },
    ]


def test_a_nodes_workloads_are_accepted_and_kept_on_the_batch() -> None:
    batch = validate_batch(_batch(_workloads()), NOW)
    assert [entry["gpu"] for entry in batch.workloads] == [0, 1, 2]
    jsonschema.validate(_batch(_workloads()), batch_schema())  # the schema agrees


def test_a_batch_without_workloads_has_none() -> None:
    assert validate_batch({"protocol": 1, "source": "node:n", "seq": 1}, NOW).workloads == []


def _mutated(path: str, value: Any) -> list[dict[str, Any]]:
    """_workloads() with the value at a dotted path ("0.processes.1.pid") set, or removed
    when `value` is the REMOVE marker."""
    workloads = copy.deepcopy(_workloads())
    *parents, last = path.split(".")
    target: Any = workloads
    for step in parents:
        target = target[int(step)] if isinstance(target, list) else target[step]
    if value is REMOVE:
        del target[last]
    elif isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return workloads


REMOVE = object()


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("0.processes.0.pid", True, "workloads[0].processes[0].pid"),
        ("0.processes.0.pid", 0, "workloads[0].processes[0].pid"),
        ("0.processes.1.sm_pct", 101, "workloads[0].processes[1].sm_pct"),
        ("0.processes.1.sm_pct", REMOVE, "workloads[0].processes[1].sm_pct"),
        ("0.processes.0.memory_mib", "1 GiB", "workloads[0].processes[0].memory_mib"),
        ("0.processes.0.owner", REMOVE, "workloads[0].processes[0].owner"),
        ("0.processes.0.owner.kind", "team", "workloads[0].processes[0].owner.kind"),
        ("0.processes.0.owner.pod_uid", "x\x00y", "workloads[0].processes[0].owner.pod_uid"),
        ("0.processes.0.owner.pod_uid", "x" * 254, "workloads[0].processes[0].owner.pod_uid"),
        ("0.processes.0.owner.job", "1", "workloads[0].processes[0].owner.job"),
        ("0.processes.1.owner.uid", -1, "workloads[0].processes[1].owner.uid"),
        ("1.allocation.job", REMOVE, "workloads[1].allocation.job"),
        ("1.allocation", REMOVE, "workloads[1].allocation"),
        ("1.processes", None, "workloads[1].processes"),
        ("1.gpu", 1024, "workloads[1].gpu"),
        ("1.ts", 12.0, "workloads[1].ts"),
        ("1.extra", 1, "workloads[1].extra"),
        ("2.mig", "", "workloads[2].mig"),
        ("2.processes.0.owner.container_id", "c", "workloads[2].processes[0].owner.container_id"),
    ],
)
def test_a_fault_is_refused_naming_its_exact_field(path: str, value: Any, field: str) -> None:
    with pytest.raises(ProtocolError) as refused:
        validate_batch(_batch(_mutated(path, value)), NOW)
    assert (refused.value.code, refused.value.field) == (400, field)


def test_more_than_256_processes_on_one_gpu_are_refused() -> None:
    workloads = _workloads()
    process = workloads[0]["processes"][0]
    workloads[0]["processes"] = [{**process, "pid": pid} for pid in range(1, 258)]
    with pytest.raises(ProtocolError, match="257 processes; at most 256"):
        validate_batch(_batch(workloads), NOW)


def test_the_same_gpu_twice_at_one_time_is_refused() -> None:
    workloads = _workloads()
    workloads.append(copy.deepcopy(workloads[1]))
    with pytest.raises(ProtocolError) as refused:
        validate_batch(_batch(workloads), NOW)
    assert refused.value.field == "workloads[3]"


def test_only_a_node_reports_workloads() -> None:
    with pytest.raises(ProtocolError, match="only a node source"):
        validate_batch(_batch(_workloads(), source="site:lon1"), NOW)


def test_workloads_that_are_not_a_list_are_refused() -> None:
    with pytest.raises(ProtocolError) as refused:
        validate_batch(_batch({"gpu": 0}), NOW)
    assert refused.value.field == "workloads"
