"""The simulator's energy truth: what each simulated GPU really used, who held it meanwhile,
and what the facility drew, minute by minute of the samples' wall clock.

The energy ledger (fleet/read/ledger.py) works from what the agents sent: counters sampled
every few seconds, 1-minute rollups, workload intervals seen every 10 s. The simulator knows
more: every step's energy, and which jobs held each GPU in that step (the schedule in
fleetsim/jobs.py). `EnergyTruth` keeps that answer key; tests/fleet/test_ledger_truth.py
holds the ledger to it.

    truth = EnergyTruth(model)
    for each step:  model.step(dt, t, wall=w0 + t);  truth.record(dt, t, w0 + t)

A step advances `[t, t + dt)` with the loads of `t` (SiteModel.step), so its energy belongs
to the jobs running at `t` and to the minute `wall` falls in.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from fleetsim.fleet import SiteModel
from fleetsim.jobs import Job

# The jobs holding a GPU in a step, by key, sorted: () when none does.
Holders = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Facility:
    """One minute's energy (J) as the model computed it, not as it was metered."""

    total_j: float = 0.0  # the facility: IT, cooling, losses
    it_j: float = 0.0  # every rack: its nodes and its own overhead (switches, PDUs, fans)
    nodes_j: float = 0.0  # the nodes alone: what the node agents report

    def __add__(self, other: Facility) -> Facility:
        return Facility(
            self.total_j + other.total_j, self.it_j + other.it_j, self.nodes_j + other.nodes_j
        )


@dataclass
class EnergyTruth:
    """Per minute: each GPU's energy by the set of jobs holding it, and the facility's."""

    model: SiteModel
    # (node, GPU, minute, holders) -> J
    gpu_j: dict[tuple[str, int, int, Holders], float] = field(
        default_factory=lambda: defaultdict(float)
    )
    facility: dict[int, Facility] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)  # every job seen holding a GPU, by key
    _last_j: dict[tuple[str, int], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._last_j = {
            (name, gpu.index): gpu.energy_j
            for name, node in self.model.nodes.items()
            for gpu in node.gpus
        }

    def record(self, dt: float, elapsed_s: float, wall: float) -> None:
        """Book the step just taken (`model.step(dt, elapsed_s, wall)`)."""
        minute = int(wall // 60) * 60
        for name, node in self.model.nodes.items():
            holders = self._holders(name, elapsed_s)
            for gpu in node.gpus:
                # The counter the fake NVML reports (GpuModel.energy_j): Σ power_avg_w × dt.
                before = self._last_j.get((name, gpu.index), gpu.energy_j)
                self._last_j[(name, gpu.index)] = gpu.energy_j
                self.gpu_j[(name, gpu.index, minute, holders.get(gpu.index, ()))] += (
                    gpu.energy_j - before
                )
        m = self.model
        nodes_w = sum(n.power_w() for n in m.nodes.values())
        step = Facility(m.total_power_w * dt, m.it_power_w * dt, nodes_w * dt)
        self.facility[minute] = self.facility.get(minute, Facility()) + step

    def held_j(self, a: int, b: int) -> dict[Holders, float]:
        """GPU energy (J) in the minutes of `[a, b)`, by the jobs that held the GPU."""
        out: dict[Holders, float] = defaultdict(float)
        for (_, _, minute, holders), joules in self.gpu_j.items():
            if a <= minute < b:
                out[holders] += joules
        return dict(out)

    def facility_j(self, a: int, b: int) -> Facility:
        return sum((f for m, f in self.facility.items() if a <= m < b), Facility())

    def _holders(self, node: str, elapsed_s: float) -> dict[int, Holders]:
        """Each GPU of `node`: the jobs holding it at `elapsed_s` (what the step ran)."""
        if self.model.jobs is None:
            return {}
        keys: dict[int, list[str]] = defaultdict(list)
        for job in self.model.jobs.running(node, elapsed_s):
            self.jobs.setdefault(job.key, job)
            for gpu in job.gpus:
                keys[gpu].append(job.key)
        return {gpu: tuple(sorted(k)) for gpu, k in keys.items()}
