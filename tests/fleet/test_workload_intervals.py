"""Who runs on each GPU, kept as intervals (fleet/storage/workloads.py): a node's `workloads`
snapshots, through the ingest pipeline and its one write path, open an interval per
(GPU, workload, source) at its processes' start where the agent sends it (else at the
snapshot), keep it while listed and close it midway between the last snapshot that listed
it and the first without it; across an agent restart, and unchanged by a resend."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from fleet.ingest.pipeline import IngestPipeline
from fleet.models import GpuAllocation, Node, Workload
from tests.support import one_node
from tests.support.latest import store_latest

pytestmark = pytest.mark.django_db

NODE = one_node.NODE
TRAINER = {"kind": "pod", "namespace": "ml", "pod": "trainer-0", "container": "train"}
TRAINER_PROCESS = {"kind": "pod", "pod_uid": "1f6a3c2e-9b4d", "container_id": "3b9f1c0d"}
JOB = {"kind": "slurm", "job": "4242", "user": "ana", "account": "physics"}
ANA = {"kind": "user", "uid": 1000, "user": "ana"}


node = one_node.node
pipeline = one_node.pipeline


def entry(
    gpu: int, allocation: dict[str, Any] | None, *processes: dict[str, Any], mig: str = ""
) -> dict[str, Any]:
    out: dict[str, Any] = {"gpu": gpu, "allocation": allocation, "processes": list(processes)}
    if mig:
        out["mig"] = mig
    return out


def process(
    pid: int, owner: dict[str, Any], memory_mib: float = 1024.0, started: float | None = None
) -> dict[str, Any]:
    out = {"pid": pid, "memory_mib": memory_mib, "sm_pct": 50.0, "owner": owner}
    return out if started is None else {**out, "started": started}


def mid(a: float, b: float) -> float:
    """Midway between two snapshots, as the server computes it."""
    return (a + b) / 2


def send(
    pipeline: IngestPipeline, seq: int, ts: float, *entries: dict[str, Any], conn: int = 1
) -> int:
    """One batch carrying one snapshot at `ts`; the answer's code (0: stored)."""
    batch = {
        "protocol": 1,
        "source": f"node:{NODE}",
        "seq": seq,
        "workloads": [{"ts": ts, **e} for e in entries],
    }
    [result] = pipeline.process([(conn, json.dumps(batch).encode())], time.time())
    return result.code


def intervals() -> list[tuple[Any, ...]]:
    """(gpu, mig, workload key, source, started, last_seen, ended), in a fixed order."""
    rows = GpuAllocation.objects.order_by("gpu", "mig", "workload__key", "source", "started")
    return [
        (a.gpu, a.mig, a.workload.key, a.source, a.started, a.last_seen, a.ended)
        for a in rows.select_related("workload")
    ]


def test_a_first_snapshot_opens_an_interval_per_gpu_workload_and_source(
    pipeline: IngestPipeline,
) -> None:
    t = time.time() - 60
    assert send(pipeline, 1, t, entry(0, TRAINER, process(4101, TRAINER_PROCESS))) == 0
    assert intervals() == [
        (0, "", "1f6a3c2e-9b4d", "process", t, t, None),
        (0, "", "ml/trainer-0", "scheduler", t, t, None),
    ]
    trainer = Workload.objects.get(key="ml/trainer-0")
    assert (trainer.kind, trainer.namespace, trainer.pod, trainer.owner) == (
        "pod",
        "ml",
        "trainer-0",
        "ml",
    )


def test_the_next_snapshot_keeps_them_open_until_its_time(pipeline: IngestPipeline) -> None:
    t = time.time() - 60
    for seq, ts in enumerate((t, t + 10, t + 20), start=1):
        assert send(pipeline, seq, ts, entry(1, JOB, process(77, JOB))) == 0
    assert intervals() == [
        (1, "", "4242", "process", t, t + 20, None),
        (1, "", "4242", "scheduler", t, t + 20, None),
    ]
    assert Workload.objects.get().owner == "physics / ana"


def test_what_a_snapshot_no_longer_lists_ends_midway_since_the_last_that_listed_it(
    pipeline: IngestPipeline,
) -> None:
    t = time.time() - 60
    send(pipeline, 1, t, entry(0, JOB, process(77, JOB)), entry(1, None, process(7, ANA)))
    send(pipeline, 2, t + 10, entry(0, JOB, process(77, JOB)), entry(1, None))
    send(pipeline, 3, t + 20, entry(0, None), entry(1, None))
    assert intervals() == [
        (0, "", "4242", "process", t, t + 10, mid(t + 10, t + 20)),
        (0, "", "4242", "scheduler", t, t + 10, mid(t + 10, t + 20)),
        (1, "", "1000", "process", t, t, mid(t, t + 10)),
    ]


def test_a_workload_that_comes_back_gets_a_new_interval(pipeline: IngestPipeline) -> None:
    t = time.time() - 60
    send(pipeline, 1, t, entry(0, None, process(7, ANA)))
    send(pipeline, 2, t + 10, entry(0, None))
    send(pipeline, 3, t + 20, entry(0, None, process(8, ANA)))
    assert intervals() == [
        (0, "", "1000", "process", t, t, mid(t, t + 10)),
        (0, "", "1000", "process", t + 20, t + 20, None),
    ]
    assert Workload.objects.count() == 1


def test_an_interval_opens_when_its_processes_started_and_their_allocation_with_them(
    pipeline: IngestPipeline,
) -> None:
    t = time.time() - 60
    send(pipeline, 1, t - 10, entry(0, None), entry(1, None))
    early, late = process(78, JOB, started=t - 7), process(77, JOB, started=t - 4)
    send(pipeline, 2, t, entry(0, JOB, late), entry(1, JOB, early))
    # Each GPU's processes their own start; the job's allocation its earliest on the node.
    assert intervals() == [
        (0, "", "4242", "process", t - 4, t, None),
        (0, "", "4242", "scheduler", t - 7, t, None),
        (1, "", "4242", "process", t - 7, t, None),
        (1, "", "4242", "scheduler", t - 7, t, None),
    ]


def test_an_allocation_whose_processes_are_another_workload_opens_at_the_snapshot(
    pipeline: IngestPipeline,
) -> None:
    t = time.time() - 60
    send(pipeline, 1, t - 10, entry(0, None))
    send(pipeline, 2, t, entry(0, TRAINER, process(4101, TRAINER_PROCESS, started=t - 4)))
    assert intervals() == [
        (0, "", "1f6a3c2e-9b4d", "process", t - 4, t, None),
        (0, "", "ml/trainer-0", "scheduler", t, t, None),
    ]


def test_a_start_before_the_previous_snapshot_opens_midway_between_the_two(
    pipeline: IngestPipeline,
) -> None:
    # The process ran an hour, but came onto this GPU after the snapshot that did not list it.
    t = time.time() - 60
    send(pipeline, 1, t - 10, entry(0, None))
    send(pipeline, 2, t, entry(0, None, process(7, ANA, started=t - 3600)))
    assert intervals() == [(0, "", "1000", "process", mid(t - 10, t), t, None)]


def test_a_nodes_first_snapshot_opens_at_the_start_however_long_ago(
    pipeline: IngestPipeline,
) -> None:
    t = time.time() - 60
    send(pipeline, 1, t, entry(0, None, process(7, ANA, started=t - 3600)))
    assert intervals() == [(0, "", "1000", "process", t - 3600, t, None)]


def test_starts_change_nothing_on_a_resend_or_across_an_agent_restart(
    pipeline: IngestPipeline,
) -> None:
    t = time.time() - 60
    running = entry(0, JOB, process(77, JOB, started=t - 4))
    send(pipeline, 1, t - 10, entry(0, None))
    send(pipeline, 2, t, running)
    send(pipeline, 3, t + 10, running)
    assert send(pipeline, 3, t + 10, running) == 0  # resent
    assert send(pipeline, 2, t, running) == 0  # older, late
    pipeline.bye(1)
    pipeline.hello(2, f"node:{NODE}", 1, "hash")
    assert send(pipeline, 1, t + 40, running, conn=2) == 0
    assert intervals() == [
        (0, "", "4242", "process", t - 4, t + 40, None),
        (0, "", "4242", "scheduler", t - 4, t + 40, None),
    ]


def test_an_agent_restart_continues_what_still_runs_and_ends_what_is_gone(
    pipeline: IngestPipeline,
) -> None:
    t = time.time() - 60
    send(pipeline, 41, t, entry(0, JOB, process(77, JOB)), entry(1, None, process(7, ANA)))
    pipeline.bye(1)
    pipeline.hello(2, f"node:{NODE}", 1, "hash")  # a new connection, seq from 1 again
    assert send(pipeline, 1, t + 30, entry(0, JOB, process(77, JOB)), entry(1, None), conn=2) == 0
    assert intervals() == [
        (0, "", "4242", "process", t, t + 30, None),
        (0, "", "4242", "scheduler", t, t + 30, None),
        (1, "", "1000", "process", t, t, mid(t, t + 30)),
    ]


def test_a_resent_or_older_batch_changes_nothing(pipeline: IngestPipeline) -> None:
    t = time.time() - 60
    send(pipeline, 1, t, entry(0, None, process(7, ANA)))
    send(pipeline, 2, t + 10, entry(0, None))
    before = intervals()
    assert send(pipeline, 2, t + 10, entry(0, None)) == 0  # the same batch again
    assert send(pipeline, 1, t, entry(0, None, process(7, ANA))) == 0  # an older one, late
    assert intervals() == before == [(0, "", "1000", "process", t, t, mid(t, t + 10))]


def test_an_allocation_running_nothing_is_an_open_scheduler_interval(
    pipeline: IngestPipeline,
) -> None:
    t = time.time() - 60
    send(pipeline, 1, t, entry(3, TRAINER))
    send(pipeline, 2, t + 10, entry(3, TRAINER))
    assert intervals() == [(3, "", "ml/trainer-0", "scheduler", t, t + 10, None)]
    [allocation] = GpuAllocation.objects.all()
    assert (allocation.pid, allocation.memory_mib) == (None, None)


def test_each_mig_device_has_intervals_of_its_own(pipeline: IngestPipeline) -> None:
    t = time.time() - 60
    send(
        pipeline,
        1,
        t,
        entry(2, None, process(7, ANA), mig="MIG-aaaa"),
        entry(2, None, process(8, ANA), mig="MIG-bbbb"),
    )
    send(pipeline, 2, t + 10, entry(2, None, process(7, ANA), mig="MIG-aaaa"))
    assert intervals() == [
        (2, "MIG-aaaa", "1000", "process", t, t + 10, None),
        (2, "MIG-bbbb", "1000", "process", t, t, mid(t, t + 10)),
    ]


def test_a_process_interval_keeps_the_peak_memory_of_its_processes(
    pipeline: IngestPipeline,
) -> None:
    t = time.time() - 60
    send(pipeline, 1, t, entry(0, None, process(7, ANA, 1000.0), process(9, ANA, 500.0)))
    send(pipeline, 2, t + 10, entry(0, None, process(9, ANA, 200.0)))
    [allocation] = GpuAllocation.objects.all()
    assert (allocation.pid, allocation.memory_mib, allocation.last_seen) == (7, 1500.0, t + 10)


def test_a_refused_batch_stores_no_interval(pipeline: IngestPipeline) -> None:
    t = time.time() - 60
    bad = process(0, ANA)  # PID 0: refused by the validator, naming the field
    assert send(pipeline, 1, t, entry(0, TRAINER), entry(1, None, bad)) == 400
    assert intervals() == []
    assert Workload.objects.count() == 0


def test_a_silent_node_keeps_its_intervals_open_known_until_last_seen(
    pipeline: IngestPipeline,
) -> None:
    t = time.time() - 600
    send(pipeline, 1, t, entry(0, JOB))
    later = time.time() - 60
    send(pipeline, 2, later, entry(0, JOB))  # after nine minutes without a snapshot
    [allocation] = GpuAllocation.objects.all()
    assert (allocation.started, allocation.last_seen, allocation.ended) == (t, later, None)


def test_the_admin_lists_workloads_and_their_intervals(
    pipeline: IngestPipeline, admin_client: Client
) -> None:
    send(pipeline, 1, time.time() - 60, entry(0, TRAINER, process(4101, TRAINER_PROCESS)))
    workloads = admin_client.get(reverse("admin:fleet_workload_changelist"))
    assert workloads.status_code == 200 and "ml/trainer-0" in workloads.content.decode()
    allocations = admin_client.get(reverse("admin:fleet_gpuallocation_changelist") + "?state=open")
    assert allocations.status_code == 200 and NODE in allocations.content.decode()
    assert admin_client.get(reverse("admin:fleet_gpuallocation_add")).status_code == 403
    allocation = GpuAllocation.objects.first()
    assert allocation is not None
    page = admin_client.get(reverse("admin:fleet_gpuallocation_change", args=[allocation.pk]))
    assert page.status_code == 200


def test_what_an_agent_learns_later_about_an_owner_fills_in_its_workload(
    pipeline: IngestPipeline,
) -> None:
    t = time.time() - 60
    send(pipeline, 1, t, entry(0, None, process(77, {"kind": "slurm", "job": "4242"})))
    send(pipeline, 2, t + 10, entry(0, None, process(77, JOB)))
    send(pipeline, 3, t + 20, entry(0, None, process(77, {"kind": "slurm", "job": "4242"})))
    [job] = Workload.objects.all()
    assert (job.job, job.user, job.account, job.first_seen) == ("4242", "ana", "physics", t)


def test_job_ids_and_pod_names_never_become_metric_labels(
    pipeline: IngestPipeline, settings: Any
) -> None:
    settings.METRICS_TOKEN = "prom-secret"
    store_latest("gpu", (Node.objects.get(name=NODE).id, 0), time.time() - 1, power_w=400.0)
    send(pipeline, 1, time.time() - 60, entry(0, TRAINER, process(4101, JOB)))
    response = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer prom-secret")
    exposition = response.content.decode()
    assert response.status_code == 200 and f'node="{NODE}"' in exposition
    assert "4242" not in exposition and "trainer-0" not in exposition
