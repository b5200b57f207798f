"""Jobs on the simulated GPUs: who holds each GPU when, and how hard they drive it.

A seeded schedule, in simulated seconds since the simulator started, computed lazily node
by node: each node is in one scheduler's cluster (Kubernetes or Slurm) and runs *waves* of
jobs, one after another with unallocated gaps between them. A node's first wave shows one
shape of the story the efficiency pages tell, held long enough for the ledger's rules
(minutes to hours); later waves are drawn from the node's own generator, so a node's
schedule depends only on the seed and its name and place in the inventory, never on the
tick length or on what other nodes did.

The shapes: training across all of a node's GPUs (high SM, high power), bursty inference
(SM and power up and down), pods on MIG slices, an allocation that runs nothing, and a hung
collective (NCCL spinning: SM busy, power near idle). A job's processes carry the cgroup
path the real runtime would give them (fleetsim/workloads.py writes them under a fake
`/proc`).
"""

from __future__ import annotations

import random
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fleetsim.inventory import Node
from fleetsim.physics import spec_for

# What a node's first wave shows, by its place in the inventory (cycled).
SHOWCASE = (
    "k8s-training",
    "slurm-training",
    "k8s-inference",
    "k8s-mig",
    "k8s-empty",
    "slurm-hung",
    "slurm-sluid",
    "slurm-partial",
)
FIRST_WAVE_S = (3600.0, 7200.0)
WAVE_S = (600.0, 2400.0)
GAP_S = (30.0, 300.0)
# A hung collective trains normally this long, then every rank waits on a peer that died.
HANG_AFTER_S = 90.0
# A hung NCCL kernel spins: the SM counter reads busy while the GPU draws little over idle.
HUNG_UTIL, HUNG_POWER = 1.0, 0.08
# Bursty inference switches between a burst and a lull every this many seconds at most.
BURST_S = 20.0
NAMESPACES = ("ml-research", "inference")
# (user, uid, account) of the Slurm cluster; pods run as uid 1000 in their image.
SLURM_USERS = (
    ("alice", 61001, "physics"),
    ("bob", 61002, "nlp"),
    ("chen", 61003, "climate"),
    ("dana", 61004, "bio"),
)
POD_UID = 1000
# MIG slices on a MIG node's GPUs (the first half of them): profile, GPU instance id.
MIG_LAYOUT = (("3g", 2), ("2g", 3), ("1g", 9))
# GB200 (186 GB): the B200's slices (180 GB: 1g.23gb, 2g.45gb, 3g.90gb; AWS SageMaker
# HyperPod's p6-b200 MIG list, github.com/aws/sagemaker-hyperpod-cli pull 403) scaled to
# its memory.
_MIG_GB = {
    "NVIDIA H200": {"3g": 71, "2g": 35, "1g": 18},
    "NVIDIA H100": {"3g": 40, "2g": 20, "1g": 10},
    "NVIDIA GB200": {"3g": 93, "2g": 47, "1g": 23},
}
# Later waves by cumulative odds; beyond the last edge the node stays idle a wave.
_K8S_WAVES = (("k8s-training", 0.35), ("k8s-inference", 0.75), ("k8s-empty", 0.85))
_SLURM_WAVES = (
    ("slurm-training", 0.45),
    ("slurm-inference", 0.7),
    ("slurm-partial", 0.8),
    ("slurm-hung", 0.85),
)
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


@dataclass(frozen=True, slots=True)
class GpuLoad:
    """What the jobs on one GPU do to it now: SM activity and power demand (0..1 of the
    headroom over idle) and the memory their processes hold."""

    util: float = 0.0
    power: float = 0.0
    memory_mib: float = 0.0


IDLE = GpuLoad()


@dataclass(frozen=True, slots=True)
class MigSlice:
    slot: int
    profile: str  # e.g. "3g.71gb"
    gi: int
    mem_mib: int

    @property
    def share(self) -> float:
        """The slice's part of the GPU's compute (a 3g slice: 3 of 7)."""
        return int(self.profile[0]) / 7.0


@dataclass(frozen=True, slots=True)
class Process:
    """One process of a job on one GPU (or MIG slot), as `/proc` and NVML show it."""

    pid: int
    gpu: int
    slot: int | None
    memory_mib: int
    cgroup: str  # the path of its `0::` line in /proc/<pid>/cgroup
    uid: int
    comm: str


@dataclass(frozen=True, slots=True)
class Job:
    """A pod or a Slurm job holding GPUs (and MIG slots) of one node from start to end."""

    key: str  # the pod UID or the Slurm job id (the SLUID on a 26.05 node)
    scheduler: str  # kubernetes | slurm
    shape: str  # training | inference | mig | empty | hung | partial
    node: str
    gpus: tuple[int, ...]
    start_s: float
    end_s: float
    level: float  # the SM activity it reaches when busy
    slots: tuple[tuple[int, int], ...] = ()  # (GPU, MIG slot) it holds
    processes: tuple[Process, ...] = ()
    namespace: str = ""
    pod: str = ""
    container: str = ""
    container_id: str = ""
    job_id: str = ""  # Slurm's numeric id (a SLUID job has one too)
    user: str = ""
    uid: int = 0
    account: str = ""

    def running(self, t: float) -> bool:
        return self.start_s <= t < self.end_s

    def activity(self, gpu: int, t: float) -> tuple[float, float]:
        """(SM activity, power demand) this job puts on `gpu` (or its slot there) at `t`."""
        if self.shape == "empty" or not any(p.gpu == gpu for p in self.processes):
            return 0.0, 0.0
        if self.shape == "hung" and t - self.start_s >= HANG_AFTER_S:
            return HUNG_UTIL, HUNG_POWER
        if self.shape == "inference" or (self.shape == "mig" and self.level < 0.9):
            return _burst(self.key, gpu, t, self.level)
        if self.shape == "partial":
            return self.level, self.level * 0.9
        return self.level, self.level


def _burst(key: str, gpu: int, t: float, level: float) -> tuple[float, float]:
    """Bursty inference: a burst or a lull each window, windows of uneven length."""
    window = int(t // BURST_S)
    roll = zlib.crc32(f"{key}/{gpu}/{window}".encode()) % 100
    if roll < 55:
        return level, level * 0.9
    return 0.06, 0.04


class NodeTimeline:
    """One node's waves of jobs, drawn lazily as simulated time moves forward."""

    def __init__(self, node: Node, position: int, seed: int) -> None:
        self.node = node
        self.position = position
        self.jobs: list[Job] = []
        self.next_start_s = 0.0
        self.waves = 0
        self._rng = random.Random(zlib.crc32(f"jobs/{node.name}".encode()) ^ seed)
        self._pid = 4100
        self._job_seq = 0
        showcase = SHOWCASE[position % len(SHOWCASE)]
        self.sluid = showcase == "slurm-sluid"  # a Slurm 26.05 node: jobs named by SLUID
        self.mig: dict[int, tuple[MigSlice, ...]] = {}
        if showcase == "k8s-mig":
            model = node.gpus[0][1] if node.gpus else ""
            family = " ".join(spec_for(model).model.split()[:2])  # "NVIDIA H100 80GB…": H100
            sizes = _MIG_GB[family]
            layout = tuple(
                MigSlice(slot, f"{p}.{sizes[p]}gb", gi, round(sizes[p] * 1e9 / 2**20))
                for slot, (p, gi) in enumerate(MIG_LAYOUT)
            )
            self.mig = {index: layout for index, _ in node.gpus[: len(node.gpus) // 2]}

    @property
    def scheduler(self) -> str:
        return "kubernetes" if SHOWCASE[self.position % len(SHOWCASE)][:3] == "k8s" else "slurm"

    def running(self, t: float) -> list[Job]:
        """The jobs holding GPUs at `t` (waves ending before `t` are forgotten)."""
        while self.next_start_s <= t:
            self._add_wave()
        self.jobs = [j for j in self.jobs if j.end_s > t - 1.0 or j.start_s > t]
        return [j for j in self.jobs if j.running(t)]

    # -- drawing waves -----------------------------------------------------------------------

    def _add_wave(self) -> None:
        rng, start = self._rng, self.next_start_s
        first = self.waves == 0
        span = FIRST_WAVE_S if first else WAVE_S
        end = start + rng.uniform(*span)
        shape = SHOWCASE[self.position % len(SHOWCASE)] if first else self._draw_shape()
        gpus = [index for index, _ in self.node.gpus if index not in self.mig]
        wave = list(self._wave(shape, gpus, start, end))
        if self.mig:
            wave += self._mig_pods(start, end)
        self.jobs.extend(wave)
        self.waves += 1
        last = max((j.end_s for j in wave), default=end)
        self.next_start_s = last + rng.uniform(*GAP_S)

    def _draw_shape(self) -> str:
        roll = self._rng.random()
        shapes = _K8S_WAVES if self.scheduler == "kubernetes" else _SLURM_WAVES
        return next((shape for shape, edge in shapes if roll < edge), "idle")

    def _wave(self, shape: str, gpus: list[int], start: float, end: float) -> Iterator[Job]:
        kind = shape.rpartition("-")[2]
        if kind in ("training", "sluid", "hung", "partial", "mig"):
            if shape.startswith("k8s"):
                yield self._pod(kind if kind != "mig" else "training", gpus, start, end)
            else:
                yield self._slurm("training" if kind == "sluid" else kind, gpus, start, end)
        elif kind == "inference":
            for gpu in gpus:
                cut = end - self._rng.uniform(0, 0.3) * (end - start)
                if shape.startswith("k8s"):
                    yield self._pod("inference", [gpu], start, cut)
                else:
                    yield self._slurm("inference", [gpu], start, cut)
        elif kind == "empty":
            held = gpus[:2]
            yield self._pod("empty", held, start, end)
            yield from self._wave("k8s-inference", gpus[2:], start, end)

    def _mig_pods(self, start: float, end: float) -> list[Job]:
        pods = []
        for gpu, layout in self.mig.items():
            for piece in layout:
                pod = self._pod("mig", [gpu], start, end, piece)
                pods.append(pod)
        return pods

    # -- one job -----------------------------------------------------------------------------

    def _pod(
        self, shape: str, gpus: list[int], start: float, end: float, piece: MigSlice | None = None
    ) -> Job:
        rng = self._rng
        uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        cid = f"{rng.getrandbits(256):064x}"
        self._job_seq += 1
        namespace, pod, container = {
            "training": ("ml-research", f"llm-pretrain-{self._job_seq}-worker-0", "trainer"),
            "inference": ("inference", f"vllm-{uid[:5]}", "vllm"),
            "empty": ("ml-research", f"notebook-{uid[:5]}", "notebook"),
            "mig": ("inference", f"embed-{uid[:5]}", "server"),
        }[shape]
        qos = "" if shape == "training" else "burstable"
        tier = f"kubepods-{qos}.slice/kubepods-{qos}-" if qos else "kubepods-"
        path = f"/kubepods.slice/{tier}pod{uid.replace('-', '_')}.slice/cri-containerd-{cid}.scope"
        slot = None if piece is None else piece.slot
        processes = () if shape == "empty" else self._processes(gpus, slot, path, POD_UID, piece)
        return self._job(
            uid,
            "kubernetes",
            shape,
            gpus,
            (start, end),
            processes,
            slots=() if piece is None else ((gpus[0], piece.slot),),
            namespace=namespace,
            pod=pod,
            container=container,
            container_id=cid,
        )

    def _slurm(self, shape: str, gpus: list[int], start: float, end: float) -> Job:
        rng = self._rng
        self._job_seq += 1
        job_id = str(4_200_000 + self.position * 10_000 + self._job_seq)
        key = "s" + "".join(rng.choice(_CROCKFORD) for _ in range(13)) if self.sluid else job_id
        user, uid, account = rng.choice(SLURM_USERS)
        parent = f"/system.slice/slurmstepd.scope/{key if self.sluid else f'job_{key}'}/step_0/user"
        on = gpus[:1] if shape == "partial" else gpus
        processes = tuple(
            self._process(gpu, None, f"{parent}/task_{n}", uid, self._memory(shape, gpu))
            for n, gpu in enumerate(on)
        )
        return self._job(
            key,
            "slurm",
            shape,
            gpus,
            (start, end),
            processes,
            job_id=job_id,
            user=user,
            uid=uid,
            account=account,
        )

    def _job(
        self,
        key: str,
        scheduler: str,
        shape: str,
        gpus: list[int],
        span: tuple[float, float],
        processes: tuple[Process, ...],
        **owner: Any,
    ) -> Job:
        """A job of this node's, `owner` its scheduler's own fields (pod names, Slurm user…)."""
        return Job(
            key=key,
            scheduler=scheduler,
            shape=shape,
            node=self.node.name,
            gpus=tuple(gpus),
            start_s=span[0],
            end_s=span[1],
            level=self._level(shape),
            processes=processes,
            **owner,
        )

    def _processes(
        self, gpus: list[int], slot: int | None, path: str, uid: int, piece: MigSlice | None
    ) -> tuple[Process, ...]:
        shape_mib = None if piece is None else round(piece.mem_mib * 0.7)
        return tuple(
            self._process(gpu, slot, path, uid, shape_mib or self._memory("training", gpu))
            for gpu in gpus
        )

    def _process(self, gpu: int, slot: int | None, path: str, uid: int, mib: int) -> Process:
        self._pid += self._rng.randint(3, 40)
        return Process(self._pid, gpu, slot, mib, path, uid, "python3")

    def _memory(self, shape: str, gpu: int) -> int:
        total = spec_for(dict(self.node.gpus).get(gpu, "")).mem_total_mib
        share = {"inference": 0.45, "partial": 0.3}.get(shape, 0.8)
        return round(total * share * self._rng.uniform(0.9, 1.0))

    def _level(self, shape: str) -> float:
        if shape in ("training", "hung"):
            return self._rng.uniform(0.93, 1.0)
        if shape == "partial":
            return self._rng.uniform(0.25, 0.4)
        return self._rng.uniform(0.6, 0.95)  # inference and MIG pods


class JobSchedule:
    """Every node's timeline; `loads(node, t)` is what drives the GPU physics."""

    def __init__(self, nodes: tuple[Node, ...] | list[Node], seed: int = 0) -> None:
        self.timelines = {
            node.name: NodeTimeline(node, position, seed) for position, node in enumerate(nodes)
        }

    def running(self, node: str, t: float) -> list[Job]:
        timeline = self.timelines.get(node)
        return [] if timeline is None else timeline.running(t)

    def mig(self, node: str) -> dict[int, tuple[MigSlice, ...]]:
        """GPU index -> its MIG slices, for the GPUs of `node` in MIG mode."""
        timeline = self.timelines.get(node)
        return {} if timeline is None else timeline.mig

    def loads(self, node: str, t: float) -> dict[int, GpuLoad]:
        """Each GPU's load from the jobs on it at `t` (a GPU with none: idle)."""
        timeline = self.timelines.get(node)
        if timeline is None:
            return {}
        util: dict[int, float] = {}
        power: dict[int, float] = {}
        memory: dict[int, float] = {}
        for job in timeline.running(t):
            for process in job.processes:
                share = 1.0
                if process.slot is not None:
                    share = timeline.mig[process.gpu][process.slot].share
                sm, watts = job.activity(process.gpu, t)
                util[process.gpu] = util.get(process.gpu, 0.0) + share * sm
                power[process.gpu] = power.get(process.gpu, 0.0) + share * watts
                memory[process.gpu] = memory.get(process.gpu, 0.0) + process.memory_mib
        return {
            index: GpuLoad(
                min(1.0, util.get(index, 0.0)),
                min(1.0, power.get(index, 0.0)),
                memory.get(index, 0.0),
            )
            for index, _ in timeline.node.gpus
        }
