"""The simulator's jobs: a seeded schedule of pods and Slurm jobs drives the GPUs, and the
agent's real workloads collector names their owners from the fake `/proc`, fake NVML,
`scontrol` and pod-resources server the simulator keeps for each node (fleetsim/jobs.py,
fleetsim/workloads.py). All in-process: the site model is stepped, the collector read."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agents.collectors.base import Reading
from agents.outbox import build_batch
from agents.protocol.validate import validate_batch
from fleetsim import workloads as sim_workloads
from fleetsim.faults import FaultPlan
from fleetsim.fleet import SiteModel
from fleetsim.inventory import Feed, Inventory, Loop, Node, Rack, fetch_inventory
from fleetsim.jobs import HANG_AFTER_S, Job, JobSchedule
from fleetsim.runner import SimSettings, Simulator
from fleetsim.workloads import NodeWorkloads, SimWorkloads
from tests.support.stub_server import ENROLL_TOKEN, StubBackend

SEED = 3
WALL = 1_795_996_000.0
NOW_S = int(HANG_AFTER_S) + 60  # the hung collective has hung for a minute
# Nodes by the story their first wave tells (fleetsim/jobs.py SHOWCASE, in inventory order).
TRAINING_POD, SLURM_TRAINING, INFERENCE, MIG, EMPTY_POD, HUNG, SLUID, PARTIAL = (
    f"gpu-a01-{n:02d}" for n in range(1, 9)
)


def _inventory() -> Inventory:
    feeds = (Feed("A", 90.0), Feed("B", 90.0))
    racks = (Rack("A01", "Hall A", "direct_liquid", 130.0, "CDU-1", feeds),)
    h200 = tuple((i, "NVIDIA H200") for i in range(8))
    nodes = tuple(Node(f"gpu-a01-{n:02d}", "A01", h200) for n in range(1, 9))
    return Inventory("lab", "Lab", racks, (Loop("CDU-1", 300.0, 34.0),), nodes)


def _model(seed: int = SEED) -> SiteModel:
    inventory = _inventory()
    return SiteModel(inventory, None, seed, jobs=JobSchedule(inventory.nodes, seed))


@dataclass
class Site:
    model: SiteModel
    workloads: SimWorkloads
    readings: dict[str, Reading]

    def entries(self, node: str) -> list[dict[str, Any]]:
        return self.readings[node].workloads

    def jobs(self, node: str) -> list[Job]:
        return self.workloads.nodes[node].running


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """Eight nodes stepped to `NOW_S`, each node's workloads read once there."""
    model = _model()
    workloads = SimWorkloads(model, tmp_path_factory.mktemp("jobs"))
    for t in range(NOW_S + 1):
        model.step(1.0, float(t), wall=WALL + t)
        workloads.sync(float(t))
    readings = {name: workloads.read(name, WALL + NOW_S) for name in model.nodes}
    yield Site(model, workloads, readings)
    workloads.close()


def _timeline(model: SiteModel, until: float, dt: float) -> list[tuple[str, str, float, float]]:
    assert model.jobs is not None
    seen: dict[str, tuple[str, str, float, float]] = {}
    t = 0.0
    while t < until:
        for name in model.nodes:
            for job in model.jobs.running(name, t):
                pids = ",".join(str(p.pid) for p in job.processes)
                seen[job.key] = (job.key, pids, job.start_s, job.end_s)
        t += dt
    return sorted(seen.values())


def test_the_schedule_is_the_same_for_a_seed_whatever_the_tick_and_another_seed_differs() -> None:
    hours = 4 * 3600.0  # past every first wave (1–2 h) into drawn ones
    assert _timeline(_model(), hours, 10.0) == _timeline(_model(), hours, 7.0)
    assert _timeline(_model(), hours, 10.0) != _timeline(_model(SEED + 1), hours, 10.0)


def test_a_training_pod_is_the_owner_of_all_eight_gpus_it_drives_hard(site: Site) -> None:
    (job,) = site.jobs(TRAINING_POD)
    entries = site.entries(TRAINING_POD)
    assert [e["gpu"] for e in entries] == list(range(8))
    for entry in entries:
        (process,) = entry["processes"]
        pod = {"kind": "pod", "namespace": "ml-research", "pod": job.pod, "pod_uid": job.key}
        # Both sides name the pod alike: the cgroup's UID joined to the kubelet's names.
        assert process["owner"] == pod | {"container": "trainer", "container_id": job.container_id}
        assert process["sm_pct"] >= 90
        assert process["memory_mib"] > 100_000
        assert entry["allocation"] == pod | {"container": "trainer"}
    gpus = site.model.nodes[TRAINING_POD].gpus
    assert all(g.util_pct >= 90 and g.power_avg_w > 600 for g in gpus)


def test_a_pod_holding_gpus_that_runs_nothing_is_allocated_with_no_process_and_idle(
    site: Site,
) -> None:
    held = {
        e["gpu"]: e
        for e in site.entries(EMPTY_POD)
        if e["allocation"]["pod"].startswith("notebook")
    }
    assert sorted(held) == [0, 1]
    assert all(e["processes"] == [] for e in held.values())
    gpus = site.model.nodes[EMPTY_POD].gpus
    assert all(gpus[i].util_pct == 0 and gpus[i].power_avg_w < 90 for i in held)


def test_a_slurm_job_using_one_of_its_eight_gpus_leaves_seven_allocated_and_empty(
    site: Site,
) -> None:
    (job,) = site.jobs(PARTIAL)
    entries = site.entries(PARTIAL)
    assert all(e["allocation"]["job"] == job.key for e in entries)
    assert [len(e["processes"]) for e in entries] == [1] + [0] * 7
    assert entries[0]["allocation"] == {
        "kind": "slurm",
        "job": job.key,
        "user": job.user,
        "account": job.account,
    }


def test_a_hung_collective_keeps_its_sms_busy_at_little_more_than_idle_power(
    site: Site,
) -> None:
    gpus = site.model.nodes[HUNG].gpus
    assert all(g.util_pct >= 95 and g.power_avg_w < 200 for g in gpus)
    assert all(e["processes"][0]["sm_pct"] >= 95 for e in site.entries(HUNG))
    assert all(site.jobs(HUNG)[0].activity(g.index, HANG_AFTER_S - 1)[1] > 0.9 for g in gpus)


def test_bursty_inference_goes_up_and_down(site: Site) -> None:
    (job, *_) = site.jobs(INFERENCE)
    gpu = job.gpus[0]
    levels = {job.activity(gpu, t)[0] > 0.5 for t in range(0, 600, 20)}
    assert levels == {True, False}


def test_mig_slices_are_each_held_by_a_pod_under_the_slices_own_uuid(site: Site) -> None:
    slices = [e for e in site.entries(MIG) if "mig" in e]
    assert len(slices) == 4 * 3 and len({e["mig"] for e in slices}) == 12
    for entry in slices:
        (process,) = entry["processes"]
        assert process["sm_pct"] is None  # NVML has no per-process use on MIG devices
        assert process["owner"]["kind"] == "pod"
        assert entry["allocation"]["namespace"] == "inference"
    reading = site.model.node_reading(MIG, time.time(), with_info=True)
    modes = [(i["mig_mode"], len(i.get("mig", []))) for i in reading.gpu_info]
    assert modes == [(True, 3)] * 4 + [(False, 0)] * 4


def test_a_slurm_26_05_node_names_its_jobs_by_sluid_with_user_and_account(site: Site) -> None:
    (job,) = site.jobs(SLUID)
    assert job.key.startswith("s") and len(job.key) == 14
    owner = site.entries(SLUID)[3]["processes"][0]["owner"]
    assert owner == {
        "kind": "slurm",
        "job": job.key,
        "step": "0",
        "user": job.user,
        "account": job.account,
    }
    numbered = site.entries(SLURM_TRAINING)[0]["processes"][0]["owner"]
    assert numbered["job"].isdigit()


def test_every_nodes_workloads_pass_the_servers_validator(site: Site) -> None:
    for name, reading in site.readings.items():
        batch = build_batch(f"node:{name}", 1, reading, {"version": "0.1.0"})
        assert len(validate_batch(batch, WALL + NOW_S).workloads) == len(reading.workloads)


def test_a_finished_jobs_processes_leave_proc_and_nvml(tmp_path: Path) -> None:
    model = _model()
    assert model.jobs is not None
    node = NodeWorkloads(model.nodes[INFERENCE], model.jobs, tmp_path, kubelet=None)
    try:
        node.sync(10.0)
        job = min(node.running, key=lambda j: j.end_s)
        pid = job.processes[0].pid
        node.sync(job.end_s - 1.0)
        assert (tmp_path / "proc" / str(pid) / "cgroup").read_text().startswith("0::/kubepods")
        node.sync(job.end_s + 1.0)
        assert not (tmp_path / "proc" / str(pid)).exists()
        listed = {e["gpu"]: e for e in node.read(WALL).workloads}
        assert pid not in [p["pid"] for p in listed[job.gpus[0]]["processes"]]
    finally:
        node.close()


def test_without_grpcio_pods_are_still_named_by_cgroup_but_not_allocated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sim_workloads, "kubelets_available", lambda: False)
    model = _model()
    workloads = SimWorkloads(model, tmp_path)
    try:
        workloads.sync(5.0)
        entry = workloads.read(TRAINING_POD, WALL).workloads[0]
        assert entry["allocation"] is None
        assert entry["processes"][0]["owner"]["kind"] == "pod"
    finally:
        workloads.close()


async def test_the_simulator_sends_each_nodes_workloads_and_clears_its_proc_on_stopping(
    backend: StubBackend, tmp_path: Path
) -> None:
    inventory = fetch_inventory(backend.url, ENROLL_TOKEN).first_nodes(2)
    settings = SimSettings(backend.url, ENROLL_TOKEN, tmp_path, interval_s=0.1, jobs=True)
    await Simulator(settings, inventory, FaultPlan()).run(duration_s=0.3)
    sent = {b["source"]: b["workloads"] for b in backend.store.batches if "workloads" in b}
    assert sorted(sent) == ["node:gpu-a01-01", "node:gpu-a01-02"]
    assert all(len(entries) == 8 for entries in sent.values())
    assert not list(tmp_path.glob("jobs/*/proc"))
