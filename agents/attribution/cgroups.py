"""Who owns a PID, from its cgroup path: a Kubernetes pod, a Slurm job, a container, a user.

NVML hands back host PIDs (the driver is not PID-namespace aware: NVIDIA/nvidia-docker#1483),
so the agent runs in the host PID and cgroup namespaces and reads the host's
`/proc/<pid>/cgroup`. Its format is one `hierarchy-ID:controllers:path` line per hierarchy
(man7 cgroups(7)); pure cgroup v2 has the one line `0::/path`, with ` (deleted)` appended
once the cgroup is gone (torvalds/linux Documentation/admin-guide/cgroup-v2.rst).

The path shapes, and where they come from:

- Kubernetes: kubelet names a pod's cgroup `[kubepods, <qos>, pod<UID>]`, Guaranteed pods
  directly under `kubepods` (kubernetes/kubernetes pkg/kubelet/cm/qos_container_manager_linux.go,
  pod_container_manager_linux.go). The systemd driver joins the parts with `-`, turns each `-`
  inside a part into `_` and nests `.slice`s: `kubepods-burstable-pod<uid_>.slice`
  (cgroup_manager_linux.go, `ToSystemd`); cgroupfs keeps `kubepods/burstable/pod<uid>`.
- Container leaves: containerd `cri-containerd-<id>.scope` (systemd) or `<id>` (cgroupfs)
  (containerd internal/cri/server/helpers_linux.go, `getCgroupsPath`; runc's `getUnitName`);
  CRI-O `crio-<id>.scope` or `crio-<id>` (cri-o internal/config/cgmgr/systemd_linux.go,
  cgroupfs_linux.go); Docker `docker-<id>.scope` under `system.slice`, or `/docker/<id>`
  (moby daemon/oci_linux.go, `WithCgroups`).
- Slurm cgroup/v1: `/slurm[_<node>]/uid_<uid>/job_<id>/step_<step>/…` (SchedMD/slurm
  src/plugins/cgroup/v1/xcgroup.c); cgroup/v2: `…/[<node>_]slurmstepd.scope/job_<id>/step_<step>/…`
  (src/plugins/cgroup/v2/cgroup_v2.c); from 26.05 the job directory is the job's SLUID, `s` and
  13 Crockford base32 characters (CHANGELOG/slurm-26.05.md, src/common/sluid.h). A step is a
  number, `batch`, `extern` or `interactive`, with `+<n>` for a heterogeneous component
  (src/common/log.c, `log_build_step_id_str`).
"""

from __future__ import annotations

import functools
import pwd
import re
from pathlib import Path

from agents.attribution.owners import ContainerOwner, Owner, PodOwner, SlurmOwner, UserOwner
from agents.attribution.starts import boot_time, start_ticks, started_at

_DELETED = " (deleted)"
# A pod UID is a UUID; a static pod's is a 32-hex hash of its manifest. `_` for `-` under systemd.
_POD = re.compile(r"(?:^|-)pod([0-9a-f][0-9a-f_-]{31,35})$")
_CONTAINER = re.compile(r"(?:cri-containerd-|crio-|docker-)?([0-9a-f]{64})(?:\.scope)?")
_DOCKER_SCOPE = re.compile(r"docker-([0-9a-f]{64})\.scope")
_HEX_ID = re.compile(r"[0-9a-f]{64}")
_SLURM_JOB = re.compile(r"job_(\d+)|(s[0-9A-HJKMNP-TV-Z]{13})")
_SLURM_STEP = re.compile(r"step_((?:\d+|batch|extern|interactive)(?:\+\d+)?)")
_SLURM_V1_USER = re.compile(r"uid_\d+")


def cgroup_path(text: str) -> str | None:
    """The path a workload's cgroup has in `/proc/<pid>/cgroup`, or None when it has none.

    On a hybrid host (v1 controllers beside the v2 `0::` line) the runtime places containers
    by the v1 controllers and the `0::` path is systemd's own tracking, so the v1 `memory`
    (or `cpu,cpuacct`) line wins; on pure v2 the `0::` line is all there is."""
    unified = None
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, sep, path = rest.partition(":")
        if not sep:
            continue
        path = path.removesuffix(_DELETED)
        if hierarchy == "0" and not controllers:
            unified = path
        elif {"memory"} <= set(controllers.split(",")) or {"cpu", "cpuacct"} <= set(
            controllers.split(",")
        ):
            return path
    return unified


def owner_from_path(path: str) -> Owner | None:
    """A pod, a Slurm job or a container from a cgroup path; None for anything else."""
    parts = [part for part in path.split("/") if part]
    return _pod(parts) or _slurm(parts) or _container(parts)


def _pod(parts: list[str]) -> PodOwner | None:
    for i, part in enumerate(parts):
        match = _POD.search(part.removesuffix(".slice"))
        if match is None or not any("kubepods" in above for above in parts[:i]):
            continue
        leaf = _CONTAINER.fullmatch(parts[i + 1]) if i + 1 < len(parts) else None
        return PodOwner(
            pod_uid=match.group(1).replace("_", "-"),
            container_id=leaf.group(1) if leaf else None,
        )
    return None


def _slurm(parts: list[str]) -> SlurmOwner | None:
    for i, part in enumerate(parts[1:], start=1):
        match = _SLURM_JOB.fullmatch(part)
        parent = parts[i - 1]
        if match is None:
            continue
        v2 = parent.endswith("slurmstepd.scope")
        v1 = match.group(1) is not None and _SLURM_V1_USER.fullmatch(parent) is not None
        if not (v1 or v2):
            continue
        step = _SLURM_STEP.fullmatch(parts[i + 1]) if i + 1 < len(parts) else None
        return SlurmOwner(
            job=match.group(1) or match.group(2), step=step.group(1) if step else None
        )
    return None


def _container(parts: list[str]) -> ContainerOwner | None:
    for i, part in enumerate(parts):
        scope = _DOCKER_SCOPE.fullmatch(part)
        if scope is not None:
            return ContainerOwner(scope.group(1))
        if part == "docker" and i + 1 < len(parts) and _HEX_ID.fullmatch(parts[i + 1]):
            return ContainerOwner(parts[i + 1])
    return None


def real_uid(status: str) -> int | None:
    """The real UID from `/proc/<pid>/status` (`Uid:` real, effective, saved, filesystem)."""
    for line in status.splitlines():
        if line.startswith("Uid:"):
            fields = line.split()
            return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
    return None


@functools.lru_cache(maxsize=1024)
def user_name(uid: int) -> str | None:
    """The account name, or None where this host cannot resolve the UID (a container's)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


class ProcReader:
    """Owners of host PIDs, read under `root` (tests point it at a recorded `/proc` tree)."""

    def __init__(self, root: Path = Path("/proc")) -> None:
        self.root = root
        self._boot: int | None = None

    def started(self, pid: int) -> float | None:
        """When the PID started (Unix time, agents/attribution/starts.py); None when it is
        gone or this host's `/proc` does not say (the boot time is read once: it is fixed)."""
        try:
            if self._boot is None:
                self._boot = boot_time((self.root / "stat").read_text())
            ticks = start_ticks((self.root / str(pid) / "stat").read_text())
        except OSError:  # exited, or no such file under a recorded tree
            return None
        if self._boot is None or ticks is None:
            return None
        return started_at(self._boot, ticks)

    def owner(self, pid: int) -> Owner | None:
        """The PID's owner; None when the process is gone (it may exit between NVML's answer
        and this read) or its files cannot be read."""
        try:
            path = cgroup_path((self.root / str(pid) / "cgroup").read_text())
            owner = owner_from_path(path) if path is not None else None
            if isinstance(owner, (PodOwner, ContainerOwner)):
                return owner
            uid = real_uid((self.root / str(pid) / "status").read_text())
        except OSError:  # ENOENT or ESRCH: exited; anything else: not ours to read
            return None
        if uid is None:
            return owner
        if isinstance(owner, SlurmOwner):
            # The job's processes run as the job's user: no scontrol needed for the name.
            return SlurmOwner(owner.job, owner.step, user_name(uid), owner.account)
        return UserOwner(uid=uid, user=user_name(uid))
