"""The `workloads` part: who runs on each GPU of a node, and what the scheduler gave it.

One entry per GPU (per MIG device where MIG is on), a full snapshot each time it is sent:

    {"ts": …, "gpu": 0, "mig": "MIG-…" (optional), "allocation": null | <owner>,
     "processes": [{"pid": 4242, "memory_mib": 1024.0, "sm_pct": 37.5 | null,
                    "started": 1767225600.25 (optional), "owner": <owner>}]}

`<owner>` is `{"kind": "pod" | "slurm" | "container" | "user", …}` (docs/protocol.md). Checked
field by field, naming the path of a fault (`workloads[3].processes[0].pid`); the sizes are
bounded so one node's part stays small beside the 1 MiB batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents.protocol import MAX_GPUS_PER_NODE

MAX_MIG_PER_GPU = 7  # the most MIG devices one GPU can be split into
MAX_WORKLOAD_ENTRIES = MAX_GPUS_PER_NODE * MAX_MIG_PER_GPU
MAX_PROCESSES_PER_GPU = 256
MAX_TEXT = 253  # a DNS-1123 subdomain, the longest Kubernetes name
MAX_PID = 4_194_304  # Linux's highest pid_max (2^22)
MAX_UID = 2**32 - 2  # (uid_t)-1 means "no user"
MAX_MEMORY_MIB = 16 * 1024 * 1024  # 16 TiB: far above any GPU's memory

ENTRY_KEYS = frozenset({"ts", "gpu", "mig", "allocation", "processes"})
PROCESS_KEYS = frozenset({"pid", "memory_mib", "sm_pct", "started", "owner"})
# kind -> (required text fields, optional text fields)
OWNER_TEXT: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "pod": (frozenset(), frozenset({"pod_uid", "namespace", "pod", "container", "container_id"})),
    "slurm": (frozenset({"job"}), frozenset({"step", "user", "account"})),
    "container": (frozenset({"container_id"}), frozenset()),
    "user": (frozenset(), frozenset({"user"})),
}

# (ts, where) -> checks the time window; raises the caller's ProtocolError
Timestamp = Callable[[Any, str], float]
Refuse = Callable[[str, str], Exception]


def check_workloads(
    value: Any, source_kind: str, timestamp: Timestamp, refuse: Refuse
) -> list[dict[str, Any]]:
    """The validated entries; `refuse(field, reason)` builds the error raised on a fault."""
    if source_kind != "node":
        raise refuse("workloads", "only a node source reports workloads")
    if type(value) is not list:
        raise refuse("workloads", "must be a list of per-GPU entries")
    if len(value) > MAX_WORKLOAD_ENTRIES:
        raise refuse(
            "workloads",
            f"{len(value)} entries; at most {MAX_WORKLOAD_ENTRIES} (GPUs and MIG devices)",
        )
    seen: dict[tuple[Any, ...], int] = {}
    for i, entry in enumerate(value):
        where = f"workloads[{i}]"
        _entry(entry, where, timestamp, refuse)
        identity = (entry["gpu"], entry.get("mig"), entry["ts"])
        j = seen.setdefault(identity, i)
        if j != i:
            raise refuse(where, f"workloads[{j}] and {where} describe the same GPU at one time")
    return value


def _entry(entry: Any, where: str, timestamp: Timestamp, refuse: Refuse) -> None:
    if type(entry) is not dict:
        raise refuse(where, "must be an object")
    _known_keys(entry, ENTRY_KEYS, where, refuse)
    timestamp(entry.get("ts"), f"{where}.ts")
    gpu = entry.get("gpu")
    if type(gpu) is not int or not 0 <= gpu <= 1023:
        raise refuse(f"{where}.gpu", "required GPU index 0..1023")
    if "mig" in entry:
        _text(entry["mig"], f"{where}.mig", refuse)
    if "allocation" not in entry:
        raise refuse(f"{where}.allocation", "required: an owner, or null when none is known")
    if entry["allocation"] is not None:
        _owner(entry["allocation"], f"{where}.allocation", refuse)
    processes = entry.get("processes")
    if type(processes) is not list:
        raise refuse(f"{where}.processes", "required list (empty when nothing runs)")
    if len(processes) > MAX_PROCESSES_PER_GPU:
        raise refuse(
            f"{where}.processes",
            f"{len(processes)} processes; at most {MAX_PROCESSES_PER_GPU} per GPU",
        )
    for k, process in enumerate(processes):
        _process(process, f"{where}.processes[{k}]", entry["ts"], refuse)


def _process(process: Any, where: str, ts: float, refuse: Refuse) -> None:
    if type(process) is not dict:
        raise refuse(where, "must be an object")
    _known_keys(process, PROCESS_KEYS, where, refuse)
    pid = process.get("pid")
    if type(pid) is not int or not 0 < pid <= MAX_PID:
        raise refuse(f"{where}.pid", f"required process ID 1..{MAX_PID}")
    if "memory_mib" in process:
        _number(process["memory_mib"], 0, MAX_MEMORY_MIB, f"{where}.memory_mib", refuse)
    if "sm_pct" not in process:
        raise refuse(f"{where}.sm_pct", "required: a percentage, or null where NVML has none")
    if process["sm_pct"] is not None:
        _number(process["sm_pct"], 0, 100, f"{where}.sm_pct", refuse)
    if "started" in process:
        # When the process started (Unix time): before the snapshot that lists it.
        _number(process["started"], 0, ts, f"{where}.started", refuse)
    if "owner" not in process:
        raise refuse(f"{where}.owner", "required object")
    _owner(process["owner"], f"{where}.owner", refuse)


def _owner(owner: Any, where: str, refuse: Refuse) -> None:
    if type(owner) is not dict:
        raise refuse(where, "must be an object with a kind")
    kind = owner.get("kind")
    if type(kind) is not str or kind not in OWNER_TEXT:
        raise refuse(f"{where}.kind", f"must be one of {sorted(OWNER_TEXT)}")
    required, optional = OWNER_TEXT[kind]
    allowed = required | optional | {"kind"} | ({"uid"} if kind == "user" else set())
    _known_keys(owner, allowed, where, refuse)
    for name in required:
        if name not in owner:
            raise refuse(f"{where}.{name}", f"required for a {kind} owner")
    for name in required | optional:
        if name in owner:
            _text(owner[name], f"{where}.{name}", refuse)
    if kind == "user":
        uid = owner.get("uid")
        if type(uid) is not int or not 0 <= uid <= MAX_UID:
            raise refuse(f"{where}.uid", f"required user ID 0..{MAX_UID}")


def _known_keys(
    obj: dict[str, Any], allowed: frozenset[str] | set[str], where: str, refuse: Refuse
) -> None:
    for key in obj:
        if key not in allowed:
            raise refuse(f"{where}.{key}", "unknown field")


def _text(value: Any, where: str, refuse: Refuse) -> None:
    if type(value) is not str or not value or len(value) > MAX_TEXT:
        raise refuse(where, f"must be text of 1-{MAX_TEXT} characters")
    if "\x00" in value:
        raise refuse(where, "text must not contain NUL characters")


def _number(value: Any, low: float, high: float, where: str, refuse: Refuse) -> None:
    if type(value) is not int and type(value) is not float:
        raise refuse(where, "must be a number")
    if not low <= value <= high:  # also false for NaN
        raise refuse(where, f"{value} is outside [{low:g}, {high:g}]")
