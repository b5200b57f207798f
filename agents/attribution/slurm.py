"""A Slurm job's user, account and GPUs on this node, from `scontrol -d -o show job <id>`.

`-o` prints one line of `Key=Value` pairs (`JobId`, `UserId=<name>(<uid>)`, `Account`, …);
`-d` adds, per group of nodes, `Nodes=<hostlist> … GRES=gpu:<type>:<n>(IDX:0-1,3)`
(SchedMD/slurm src/scontrol/info_job.c; the IDX format, src/stepmgr/gres_stepmgr.c).
scontrol takes a SLUID wherever it takes a job ID (doc/man/man1/scontrol.1).

IDX is a position in the node's GRES list, not an NVML index (NVML orders GPUs by PCI bus,
`/dev/nvidiaN` by minor number: doc/html/gres.shtml); the collector maps it through the
GPUs' minor numbers.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from agents.log import get_logger

log = get_logger("agents.attribution.slurm")

_USER_ID = re.compile(r"(?P<name>[^()]*)\((?P<uid>\d+)\)")
_GRES_ITEM = re.compile(r"(?:^|,)([^,(]+)\(IDX:([^)]*)\)")
_HOSTLIST_ITEM = re.compile(r"([^\[,]+)(?:\[([^\]]*)\])?([^,\[]*)")
_CACHE_MAX = 4096  # jobs remembered; a node sees far fewer between restarts

Run = Callable[..., "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True, slots=True)
class JobInfo:
    job: str
    user: str | None = None
    uid: int | None = None
    account: str | None = None
    # (hostlist, GRES indexes) per node group of the allocation
    gres: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def gres_on(self, node: str) -> tuple[int, ...]:
        """The GPU GRES indexes the job holds on `node` (empty when none, or not listed)."""
        for nodes, indexes in self.gres:
            if node in expand_hostlist(nodes):
                return indexes
        return ()


def parse_show_job(line: str) -> JobInfo | None:
    """One `scontrol -d -o show job` line; None when it names no job."""
    values: dict[str, str] = {}
    groups: list[tuple[str, tuple[int, ...]]] = []
    nodes = ""
    for token in line.split():
        key, sep, value = token.partition("=")
        if not sep:
            continue  # a word of a value with spaces (Comment=, Reason=): not needed
        if key == "Nodes":
            nodes = value
        elif key == "GRES" and nodes:
            groups.append((nodes, gres_indexes(value)))
        values.setdefault(key, value)
    job = values.get("JobId")
    if not job:
        return None
    user, uid = None, None
    owner = _USER_ID.fullmatch(values.get("UserId", ""))
    if owner is not None:
        user, uid = owner.group("name") or None, int(owner.group("uid"))
    account = values.get("Account") or None
    return JobInfo(job, user, uid, None if account == "(null)" else account, tuple(groups))


def gres_indexes(gres: str) -> tuple[int, ...]:
    """The GPU indexes in a GRES string: `gpu:h100:2(IDX:0-1,3)` -> (0, 1, 3); other GRES
    (`shard`, `mps`, licences) and `IDX:N/A` add none."""
    found: list[int] = []
    for name, indexes in _GRES_ITEM.findall(gres):
        if name.split(":", 1)[0] == "gpu":
            found.extend(_ranges(indexes))
    return tuple(sorted(set(found)))


def _ranges(text: str) -> list[int]:
    out: list[int] = []
    for piece in text.split(","):
        low, _, high = piece.partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            out.extend(range(int(low), int(high or low) + 1))
    return out


def expand_hostlist(hostlist: str) -> set[str]:
    """`gpu[01-03,07],login1` -> {gpu01, gpu02, gpu03, gpu07, login1} (one bracket per name)."""
    hosts: set[str] = set()
    for prefix, ranges, suffix in _HOSTLIST_ITEM.findall(hostlist):
        if not ranges:
            hosts.add(prefix + suffix)
            continue
        for piece in ranges.split(","):
            low, _, high = piece.partition("-")
            if not low.isdigit() or (high and not high.isdigit()):
                continue
            width = len(low)
            hosts.update(
                f"{prefix}{n:0{width}d}{suffix}" for n in range(int(low), int(high or low) + 1)
            )
    return hosts


class Scontrol:
    """`scontrol` asked once per job (a job's user, account and GRES do not change while it
    runs). No scontrol on this node: every answer is None, and it is not looked for again."""

    def __init__(self, command: str = "scontrol", timeout_s: float = 2.0, run: Run | None = None):
        self.command = command
        self.timeout_s = timeout_s
        self.supported = bool(command)
        self._run: Run = run if run is not None else subprocess.run
        self._cache: dict[str, JobInfo | None] = {}

    def job(self, job: str) -> JobInfo | None:
        if not self.supported:
            return None
        if job in self._cache:
            return self._cache[job]
        try:
            done = self._run(
                [self.command, "-d", "-o", "show", "job", job],
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                check=False,
            )
        except FileNotFoundError:
            self.supported = False
            log.info("no scontrol here: Slurm jobs are named without user and account")
            return None
        except (subprocess.TimeoutExpired, OSError) as exc:
            log.warning("scontrol did not answer: asked again next time", job=job, error=str(exc))
            return None
        info = parse_show_job(done.stdout) if done.returncode == 0 else None
        if len(self._cache) >= _CACHE_MAX:
            del self._cache[next(iter(self._cache))]
        self._cache[job] = info  # a finished job's "Invalid job id" is remembered too
        return info
