"""Who runs on each GPU: the `workloads` part, read on the slow lane (every 10 s by default).

Per GPU (per MIG device where MIG is on): NVML's compute and graphics processes with the
memory each holds and, where NVML samples it, each one's SM use; each PID's owner from its
cgroup path (agents/attribution/cgroups.py) and when it started (`/proc/<pid>/stat`: the
server opens its interval there rather than at the first snapshot); and the GPU's
*allocation*, what the scheduler gave: the kubelet's pod-resources device IDs (when
`kubelet_pod_resources_socket` is set) or the GPUs `scontrol -d` lists for a Slurm job seen
on this node. An allocation with no process is the waste this part exists to show, so a GPU
is sent even with no process on it.

Each read is a full snapshot: the server needs no memory of earlier ones.
"""

from __future__ import annotations

import importlib
import socket
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from agents.attribution.cgroups import ProcReader
from agents.attribution.joins import Held, join, sole_pod
from agents.attribution.owners import Owner, PodOwner, SlurmOwner, as_wire
from agents.attribution.slurm import Scontrol
from agents.collectors.base import NotPresent, Reading, SlowRead
from agents.collectors.gpu_fields import MIB
from agents.log import get_logger
from agents.nvml.wrapper import DeviceHandle, GpuLost, GpuProcess, Nvml, NvmlUnavailable

log = get_logger("agents.collectors.workloads")

MAX_PROCESSES_PER_GPU = 256  # the protocol's bound (agents/protocol/workloads.py)
_PODRESOURCES = "agents.attribution.podresources"


class WorkloadCollector:
    name = "workloads"

    def __init__(
        self,
        nvml: Nvml,
        procs: ProcReader,
        interval_s: float = 1.0,
        every_s: float = 10.0,
        pod_resources_socket: str = "",
        scontrol: Scontrol | None = None,
        node: str | None = None,
    ) -> None:
        self.nvml = nvml
        self.procs = procs
        self.interval_s = interval_s
        self.every_ticks = max(1, round(every_s / interval_s))
        self.pod_resources_socket = pod_resources_socket
        self.scontrol = scontrol if scontrol is not None else Scontrol("")
        self.node = node or socket.gethostname().split(".", 1)[0]  # Slurm's NodeName
        self.handles: dict[int, DeviceHandle] = {}
        self.uuids: dict[int, str] = {}
        self._gres_order: list[int] = []  # GPU indexes by /dev/nvidiaN minor: GRES IDX order
        self._last_seen_us: dict[int, int] = {}
        # PID -> its start, for the PIDs of the last read: a process's start never changes,
        # so only PIDs new since then cost a read of /proc/<pid>/stat.
        self._starts: dict[int, float | None] = {}
        self._starts_now: dict[int, float | None] = {}
        self._pods_warned = False

    def setup(self) -> None:
        try:
            self.nvml.init()
        except NvmlUnavailable as exc:  # the GPU collector reports a missing driver already
            raise NotPresent(str(exc)) from None
        minors: list[tuple[int, int]] = []
        for index in range(self.nvml.device_count()):
            try:
                handle = self.nvml.handle(index)
                self.uuids[index] = self.nvml.uuid(index, handle) or ""
                minor = self.nvml.minor_number(index, handle)
            except Exception:  # the GPU collector reports a GPU it cannot open
                continue
            self.handles[index] = handle
            minors.append((index if minor is None else minor, index))
        self._gres_order = [index for _, index in sorted(minors)]

    def close(self) -> None:
        self.nvml.shutdown()

    def collect(self, now: float) -> Reading:
        return Reading()  # everything here is on the slow lane

    def slow_reads(self) -> list[SlowRead]:
        return [SlowRead("workloads", self.every_ticks, 0, self.read)]

    # -- one snapshot ------------------------------------------------------------------------

    def read(self, now: float) -> Reading:
        pods = self._pod_allocations()
        self._starts, self._starts_now = self._starts_now, {}
        entries: list[dict[str, Any]] = []
        for index, handle in self.handles.items():
            try:
                entries.extend(self._gpu_entries(index, handle, now, pods))
            except GpuLost:
                continue  # the GPU collector reports it as gpu_lost
        self._join_pods(entries)
        self._slurm(entries)
        for entry in entries:
            owner = entry.pop("_allocation", None)
            entry["allocation"] = None if owner is None else as_wire(owner)
            for process in entry["processes"]:
                process["owner"] = as_wire(process["owner"])
        return Reading(workloads=entries)

    def _gpu_entries(
        self, index: int, handle: DeviceHandle, now: float, pods: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        if not self.nvml.mig_enabled(index, handle):
            sm = self._sm_by_pid(index, handle)
            processes = self.nvml.running_processes(index, handle) or []
            return [self._entry(now, index, None, pods.get(self.uuids[index]), processes, sm)]
        entries = []
        for slot in range(self.nvml.max_mig_device_count(index, handle) or 0):
            mig = self.nvml.mig_device_handle(index, handle, slot)
            if mig is None:
                continue
            uuid = self.nvml.uuid(index, mig)
            processes = self.nvml.running_processes(index, mig, f":mig{slot}") or []
            # nvml.h: no per-process utilisation on MIG devices: sm_pct is null, not 0.
            entries.append(self._entry(now, index, uuid, pods.get(uuid or ""), processes, None))
        return entries

    def _entry(
        self,
        now: float,
        index: int,
        mig: str | None,
        pod_refs: Any,
        processes: list[GpuProcess],
        sm: dict[int, float] | None,
    ) -> dict[str, Any]:
        entry: dict[str, Any] = {"ts": now, "gpu": index}
        if mig:
            entry["mig"] = mig
        entry["_allocation"] = _pod_owner(pod_refs)
        entry["_sole_pod"] = sole_pod(pod_refs)
        rows = []
        heaviest = sorted(processes, key=lambda p: -(p.used_bytes or 0))
        for process in heaviest[:MAX_PROCESSES_PER_GPU]:
            owner = self.procs.owner(process.pid)
            if owner is None:
                continue  # exited since NVML listed it
            row: dict[str, Any] = {"pid": process.pid}
            if process.used_bytes is not None:
                row["memory_mib"] = round(process.used_bytes / MIB, 1)
            row["sm_pct"] = None if sm is None else sm.get(process.pid, 0.0)
            row["owner"] = owner
            started = self._started(process.pid)
            if started is not None and started <= now:  # later: a clock stepped back
                row["started"] = started
            rows.append(row)
        entry["processes"] = sorted(rows, key=lambda r: r["pid"])
        return entry

    def _started(self, pid: int) -> float | None:
        """The PID's start (Unix time), read once while the PID stays listed; a PID that
        leaves and comes back (reused) is read again."""
        if pid in self._starts_now:
            return self._starts_now[pid]
        started = self._starts[pid] if pid in self._starts else self.procs.started(pid)
        self._starts_now[pid] = started
        return started

    def _sm_by_pid(self, index: int, handle: DeviceHandle) -> dict[int, float] | None:
        """Each PID's mean SM % over the samples since the last read; a PID without a sample
        was idle (NVML lists only non-zero use). None: not supported here."""
        samples = self.nvml.process_sm_utilization(index, handle, self._last_seen_us.get(index, 0))
        if samples is None:
            return None
        by_pid: dict[int, list[int]] = {}
        for pid, stamp, sm in samples:
            by_pid.setdefault(pid, []).append(sm)
            self._last_seen_us[index] = max(self._last_seen_us.get(index, 0), stamp)
        return {pid: round(sum(v) / len(v), 1) for pid, v in by_pid.items()}

    @staticmethod
    def _join_pods(entries: list[dict[str, Any]]) -> None:
        """Processes' pod UIDs and allocations' pod names joined, so that both name the pod
        alike (agents/attribution/joins.py)."""
        held = [Held(e.pop("_sole_pod"), [p["owner"] for p in e["processes"]]) for e in entries]
        joins = join(held)
        if not joins.pods:
            return
        for entry in entries:
            entry["_allocation"] = joins.with_uid(entry["_allocation"])
            for process in entry["processes"]:
                process["owner"] = joins.named(process["owner"])

    # -- what the schedulers gave ------------------------------------------------------------

    def _pod_allocations(self) -> Mapping[str, Any]:
        """Device ID (`GPU-<uuid>`, `MIG-<uuid>`) -> the pods holding it, from the kubelet;
        nothing when unset, and nothing (warned once) when it cannot be asked."""
        if not self.pod_resources_socket:
            return {}
        try:
            module = importlib.import_module(_PODRESOURCES)
            allocations: Mapping[str, Any] = module.list_allocations(self.pod_resources_socket)
        except Exception as exc:  # any failure means "no allocations known"
            if not self._pods_warned:
                self._pods_warned = True
                log.warning(
                    "pod-resources not read: GPUs sent without pod allocations", error=str(exc)
                )
            return {}
        self._pods_warned = False  # warn again if it breaks again
        return allocations

    def _slurm(self, entries: list[dict[str, Any]]) -> None:
        """Slurm jobs seen on this node's GPUs: their user and account on each process, and
        each GPU their GRES names (mapped from GRES IDX through the minor numbers) as
        allocated. A job is one owner on both sides: its user is scontrol's `UserId` (the
        process's own user only where scontrol names none), so a process and the allocation
        of one job never disagree on who or which account."""
        if not self.scontrol.supported:
            return
        by_gpu = {e["gpu"]: e for e in entries if "mig" not in e}
        for entry in entries:
            for process in entry["processes"]:
                owner: Owner = process["owner"]
                if not isinstance(owner, SlurmOwner):
                    continue
                info = self.scontrol.job(owner.job)
                if info is None:
                    continue
                job = SlurmOwner(owner.job, None, info.user or owner.user, info.account)
                process["owner"] = replace(owner, user=job.user, account=job.account)
                for idx in info.gres_on(self.node):
                    held = (
                        by_gpu.get(self._gres_order[idx]) if idx < len(self._gres_order) else None
                    )
                    if held is not None and held["_allocation"] is None:
                        held["_allocation"] = job


def _pod_owner(refs: Any) -> PodOwner | None:
    """The pod that holds a device: pod-resources answers a PodRef or a tuple of them (a
    time-sliced GPU); the first by name stands for a shared one."""
    if refs is None:
        return None
    listed = sorted(refs if isinstance(refs, (tuple, list)) else (refs,), key=_ref_key)
    if not listed:
        return None
    ref = listed[0]
    return PodOwner(
        namespace=getattr(ref, "namespace", None),
        pod=getattr(ref, "pod", None),
        container=getattr(ref, "container", None),
    )


def _ref_key(ref: Any) -> tuple[str, str, str]:
    namespace, pod, container = (getattr(ref, n, None) for n in ("namespace", "pod", "container"))
    return (str(namespace or ""), str(pod or ""), str(container or ""))
