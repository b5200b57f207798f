"""The job schedule, shown to each virtual node's real workloads collector the way a host
shows it to the agent.

Per simulated node, under the simulator's working directory (`<jobs dir>/<node>/`):

- `proc/<pid>/cgroup`, `proc/<pid>/status` and `proc/<pid>/stat` for each job process,
  written when it starts and removed when it ends, in the real shapes (`stat`'s starttime
  is the job's start, in clock ticks after a boot at simulated time 0, which `proc/stat`'s
  `btime` places on the wall clock at the first read): cgroup v2 with the systemd driver and
  containerd for pods (`/kubepods.slice/…pod<uid>.slice/cri-containerd-<id>.scope`),
  `slurmstepd.scope/job_<id>/step_0/user/task_<n>` for Slurm (the SLUID as the job
  directory on the 26.05-style node); the agent's `ProcReader` reads them as `proc_root`;
- a fake NVML (fleetsim/fake_nvml.py, bare: no capture needed) whose process lists carry
  those PIDs with their memory and SM use, its MIG slices the schedule's;
- a fake `scontrol` (the agent's `Scontrol` takes a callable in place of running the
  program) answering `scontrol -d -o show job <id>` from the schedule;
- on Kubernetes nodes, when grpcio is installed, a pod-resources server on a unix socket
  (in a short temporary folder: gRPC binds none of 106 characters or more) answering
  `List` with the pods holding the node's GPUs and MIG slices; without grpcio, pods'
  allocations are left out (their processes are still attributed by cgroup) and a log
  line says so.

The collector is `agents.collectors.workloads.WorkloadCollector`, unchanged: what the
simulator sends as `workloads` is what a real agent on such a host would send.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agents.attribution.cgroups import ProcReader
from agents.attribution.slurm import Scontrol
from agents.attribution.starts import CLOCK_TICKS
from agents.collectors.base import Reading
from agents.collectors.workloads import WorkloadCollector
from agents.log import get_logger
from agents.nvml.wrapper import Nvml
from fleetsim.fake_nvml import FakeNvml
from fleetsim.fleet import SiteModel, VirtualNode
from fleetsim.jobs import Job, JobSchedule, Process
from fleetsim.nvml_answers import FakeProcess, MigInstance
from fleetsim.physics import gpu_uuid

log = get_logger("fleetsim.workloads")

WORKLOADS_S = 10.0  # the agent's default `workloads_s`


class NodeWorkloads:
    """One virtual node's `/proc`, NVML processes, scontrol and kubelet, and its collector."""

    def __init__(
        self, node: VirtualNode, schedule: JobSchedule, root: Path, kubelet: Path | None
    ) -> None:
        self.node = node
        self.schedule = schedule
        self.root = root
        self.proc = root / "proc"
        self.now = 0.0
        self.running: list[Job] = []
        self.live: dict[int, Process] = {}
        self.boot: int | None = None  # the wall clock's Unix time at simulated time 0
        shutil.rmtree(self.proc, ignore_errors=True)  # a previous run's processes are gone
        self.proc.mkdir(parents=True)
        count = max((g.index for g in node.gpus), default=-1) + 1
        self.nvml = FakeNvml(
            None,
            gpus=count,
            clock=lambda: self.now,
            uuids=[gpu_uuid(node.name, i) for i in range(count)],
            mig={
                gpu: [MigInstance(s.profile, s.gi, 0, s.mem_mib) for s in slices]
                for gpu, slices in node.mig.items()
            },
        )
        self.kubelet = _serve_kubelet(self, kubelet) if kubelet else None
        self.collector = WorkloadCollector(
            Nvml(self.nvml),
            ProcReader(self.proc),
            every_s=WORKLOADS_S,
            pod_resources_socket=self.kubelet.path if self.kubelet else "",
            scontrol=Scontrol("scontrol", run=self.scontrol),
            node=node.name,
        )
        self.collector.setup()

    def sync(self, t: float) -> None:
        """Processes that started by `t` appear under `proc/`, those that ended go."""
        self.now = t
        self.running = self.schedule.running(self.node.name, t)
        wanted = {p.pid: p for job in self.running for p in job.processes}
        if wanted.keys() == self.live.keys():
            return
        started = {p.pid: job.start_s for job in self.running for p in job.processes}
        for pid in self.live.keys() - wanted.keys():
            shutil.rmtree(self.proc / str(pid), ignore_errors=True)
        for pid in wanted.keys() - self.live.keys():
            _write_proc(self.proc / str(pid), wanted[pid], started[pid])
        self.live = wanted

    def read(self, ts: float) -> Reading:
        """The collector's snapshot now (call `sync` first)."""
        if self.boot is None:
            self.boot = round(ts - self.now)
            _write_boot(self.proc, self.boot)
        self._list_processes()
        return self.collector.read(ts)

    def _list_processes(self) -> None:
        """NVML's process lists as `/proc` has them, each one's SM use its GPU's now (made
        only when the collector reads: nothing else asks)."""
        util = {g.index: g.util_pct for g in self.node.gpus if not g.lost}
        # A GPU off the bus answers NVML with GPU_IS_LOST, as on a real host.
        self.nvml.lost_at = {g.index: 0.0 for g in self.node.gpus if g.lost}
        lists: dict[int | tuple[int, int], list[FakeProcess]] = {}
        for process in self.live.values():
            key = process.gpu if process.slot is None else (process.gpu, process.slot)
            sm = round(util.get(process.gpu, 0.0))
            lists.setdefault(key, []).append(FakeProcess(process.pid, process.memory_mib, sm))
        self.nvml.processes = lists

    def scontrol(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        """`scontrol -d -o show job <id>`, answered from the jobs running now."""
        wanted = argv[-1]
        for job in self.running:
            if job.scheduler == "slurm" and wanted in (job.key, job.job_id):
                return subprocess.CompletedProcess(argv, 0, show_job_line(job), "")
        error = "slurm_load_jobs error: Invalid job id specified\n"
        return subprocess.CompletedProcess(argv, 1, "", error)

    def close(self) -> None:
        if self.kubelet is not None:
            self.kubelet.stop()
        shutil.rmtree(self.proc, ignore_errors=True)


def show_job_line(job: Job) -> str:
    """One `scontrol -d -o show job` line (SchedMD/slurm src/scontrol/info_job.c's keys)."""
    count = len(job.gpus)
    indexes = ",".join(str(i) for i in job.gpus)
    return (
        f"JobId={job.job_id} JobName={job.shape} UserId={job.user}({job.uid}) "
        f"GroupId={job.user}({job.uid}) Account={job.account} QOS=normal JobState=RUNNING "
        f"NodeList={job.node} BatchHost={job.node} NumNodes=1 "
        f"TRES=cpu={16 * count},node=1,gres/gpu={count} "
        f"Nodes={job.node} CPU_IDs=0-{16 * count - 1} Mem={65536 * count} "
        f"GRES=gpu:{count}(IDX:{indexes})\n"
    )


def _write_proc(directory: Path, process: Process, start_s: float) -> None:
    """`cgroup` (pure cgroup v2: one `0::` line), `status` and `stat` as the kernel words
    them, `stat`'s starttime (field 22) the job's start in ticks since simulated time 0."""
    directory.mkdir(parents=True, exist_ok=True)
    ticks = round(start_s * CLOCK_TICKS)
    (directory / "stat").write_text(
        f"{process.pid} ({process.comm}) S 1 {process.pid} {process.pid} 0 -1 4194560 0 0 0 0"
        f" 0 0 0 0 20 0 1 0 {ticks} 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0"
        " 0 0 0 0 0\n"
    )
    (directory / "cgroup").write_text(f"0::{process.cgroup}\n")
    ids = f"{process.uid}\t{process.uid}\t{process.uid}\t{process.uid}"
    (directory / "status").write_text(
        f"Name:\t{process.comm}\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t{process.pid}\n"
        f"Ngid:\t0\nPid:\t{process.pid}\nPPid:\t1\nTracerPid:\t0\nUid:\t{ids}\nGid:\t{ids}\n"
        "FDSize:\t256\nGroups:\t\n"
    )


def _write_boot(proc: Path, boot: int) -> None:
    """`/proc/stat` with the lines the agent reads (`btime`) and the shape of the others."""
    (proc / "stat").write_text(
        "cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\nintr 0\nctxt 0\n"
        f"btime {boot}\nprocesses 0\nprocs_running 1\nprocs_blocked 0\n"
    )


class _Kubelet:
    """A pod-resources `List` server for one node, answering from its running pods."""

    def __init__(self, workloads: NodeWorkloads, path: Path) -> None:
        import grpc

        from agents.attribution.proto import podresources_pb2_grpc as pb_grpc

        class Lister(pb_grpc.PodResourcesListerServicer):  # type: ignore[misc]
            def List(self, request: Any, context: Any) -> Any:
                return pod_resources(workloads)

        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        self.path = str(path)
        self.server = grpc.server(ThreadPoolExecutor(max_workers=1))
        pb_grpc.add_PodResourcesListerServicer_to_server(Lister(), self.server)
        self.server.add_insecure_port(f"unix://{self.path}")
        self.server.start()

    def stop(self) -> None:
        self.server.stop(grace=None)
        Path(self.path).unlink(missing_ok=True)


def _serve_kubelet(workloads: NodeWorkloads, path: Path) -> _Kubelet | None:
    """A pod-resources server for the node, or None (logged) where gRPC cannot bind one."""
    try:
        return _Kubelet(workloads, path)
    except RuntimeError as exc:  # gRPC's own answer to a socket it cannot bind
        log.warning(
            "no pod-resources socket: no pod allocations", node=workloads.node.name, error=str(exc)
        )
        return None


def pod_resources(workloads: NodeWorkloads) -> Any:
    """The kubelet's `List` answer: each running pod's container and the GPUs (`GPU-<uuid>`)
    or MIG slice (`MIG-<uuid>`, resource `nvidia.com/mig-<profile>`) it holds, as NVIDIA's
    device plugin names them."""
    from agents.attribution.proto import podresources_pb2 as pb

    pods = []
    nvml = workloads.nvml
    for job in workloads.running:
        if job.scheduler != "kubernetes":
            continue
        if job.slots:
            gpu, slot = job.slots[0]
            resource = f"nvidia.com/mig-{nvml.mig[gpu][slot].profile}"
            ids = [nvml.mig_uuid(gpu, slot)]
        else:
            resource, ids = "nvidia.com/gpu", [nvml.gpu_uuid(g) for g in job.gpus]
        devices = [pb.ContainerDevices(resource_name=resource, device_ids=ids)]
        container = pb.ContainerResources(name=job.container, devices=devices)
        pods.append(pb.PodResources(name=job.pod, namespace=job.namespace, containers=[container]))
    return pb.ListPodResourcesResponse(pod_resources=pods)


def kubelets_available() -> bool:
    """Whether pod-resources servers can be run here (grpcio and protobuf importable)."""
    try:
        import grpc  # noqa: F401

        from agents.attribution.proto import podresources_pb2_grpc  # noqa: F401
    except (ImportError, RuntimeError):
        return False
    return True


class SimWorkloads:
    """Every virtual node's workloads: synced each tick, read every `WORKLOADS_S`, each
    node on its own tick of the cycle so that reads do not all land together."""

    def __init__(self, model: SiteModel, root: Path, interval_s: float = 1.0) -> None:
        if model.jobs is None:
            raise ValueError("the site model has no job schedule")
        self.every_ticks = max(1, round(WORKLOADS_S / interval_s))
        kubelets = kubelets_available()
        if not kubelets:
            log.info("grpcio is not installed: pods' GPU allocations are left out")
        # The kubelets' sockets in a short folder of their own: gRPC binds a unix socket only
        # when its path is under 106 characters, and the jobs dir may be deep (a test's tmp).
        self.sockets = Path(tempfile.mkdtemp(prefix="fwsim-kubelets-"))
        self.nodes: dict[str, NodeWorkloads] = {}
        for i, (name, node) in enumerate(model.nodes.items()):
            timeline = model.jobs.timelines[name]
            serve = kubelets and timeline.scheduler == "kubernetes"
            socket = self.sockets / f"{i}.sock" if serve else None
            self.nodes[name] = NodeWorkloads(node, model.jobs, root / name, socket)
        self._offsets = {name: i % self.every_ticks for i, name in enumerate(self.nodes)}

    def sync(self, t: float) -> None:
        for node in self.nodes.values():
            node.sync(t)

    def due(self, name: str, tick: int) -> bool:
        return tick % self.every_ticks == self._offsets.get(name, -1)

    def read(self, name: str, ts: float) -> Reading:
        return self.nodes[name].read(ts)

    def close(self) -> None:
        for node in self.nodes.values():
            node.close()
        shutil.rmtree(self.sockets, ignore_errors=True)
