"""A node's `workloads` snapshots stored as intervals (fleet/models/workloads.py), set-based,
in the commit that stores the batch's samples (`fleet.storage.samples.write_samples`).

A snapshot lists everything on the node's GPUs at one time, so for each node it applies:

- open an interval for each (GPU, MIG device, workload, source) not open yet, `started` at
  the earliest start of the owner's processes where the agent sends it (a process interval:
  its processes on that GPU; an allocation: the owner's processes anywhere on the node, a
  pod's devices being allocated before its containers start), after the node's previous
  snapshot (which did not list it: an earlier start puts it midway between the two) and
  not after this one; with no start sent, at the snapshot;
- bump `last_seen` (and peak memory) of those still open;
- close those open for the node that it no longer lists, at the midpoint between the last
  snapshot that listed them (`last_seen`) and this one: the job ended somewhere between the
  two, and without more to go on the midpoint is the estimate whose error is smallest at
  its worst (half the gap) and averages out over many jobs;
- add, for each GPU running processes of two or more workloads, each one's SM activity to
  its minute in `fw_gpu_share_1m` (the ledger splits a shared GPU's energy by it): only
  processes NVML reports SM activity for, so a fleet of exclusive GPUs writes nothing.

A snapshot applies only if it is newer than the node's last one (`fleet_workloadsnapshot`):
a resent batch, or one older than what is stored, changes nothing. The agent's first
snapshot after a restart is just the next one: what still runs continues its interval.

Per commit it runs a handful of statements whatever the number of nodes (more only when a
commit holds several snapshots of one node): no per-row work in the database.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleet.storage.db import Row, Tx
from fleet.storage.dialect import rows_source

# The descriptive fields of an owner kept on its workload row (all text but `uid`).
FIELDS = (
    "namespace",
    "pod",
    "pod_uid",
    "container",
    "container_id",
    "job",
    "step",
    "user",
    "uid",
    "account",
)
SCHEDULER = "scheduler"
PROCESS = "process"
# An allocation read from a pulled dcgm-exporter series' pod labels (fleet/ingest/prometheus/
# pull_pods.py), not from the node's own scheduler: kept apart so a reader can tell them.
# Not among the model's choices (AllocationSource): the column enforces none in the database.
EXPORTER = "exporter"
_SQLITE_MAX_PARAMS = 32766  # as fleet/storage/db.py: one statement's bound values
# PostgreSQL type names of the columns each statement binds (`rows_source`).
_NODE_TS = ("int", "float8")
_WORKLOAD_KEY = ("int", "text", "text")
_WORKLOAD = (*_WORKLOAD_KEY, *("bigint" if n == "uid" else "text" for n in FIELDS), "float8")
_ALLOCATION = ("int", "int", "int", "text", "bigint", "text", "float8", "float8", "int", "float8")
_SHARE = ("bigint", "int", "int", "int", "float8", "int")
# Per minute, the SM activity of each workload on a GPU that processes of two or more share
# (migration 0026): read by the ledger, trimmed with the 1-minute tier (retention.py).
SHARE_TABLE = "fw_gpu_share_1m"

OwnerKey = tuple[str, str]  # (kind, stable key)


@dataclass(frozen=True, slots=True)
class Seen:
    """One workload on one GPU (or MIG device) in one snapshot, as one source shows it."""

    gpu: int
    mig: str  # "" for a whole GPU
    owner: OwnerKey
    source: str
    pid: int | None = None
    memory_mib: float | None = None
    started: float | None = None  # its processes' earliest start, where the agent sent one
    sm_pct: float | None = None  # its processes' SM activity added up; None where NVML has none


@dataclass(slots=True)
class Snapshot:
    """Everything one node's workloads collector saw at `ts`."""

    node_id: int
    site_id: int
    ts: float
    seen: list[Seen] = field(default_factory=list)
    owners: dict[OwnerKey, dict[str, Any]] = field(default_factory=dict)
    starts: dict[OwnerKey, float] = field(default_factory=dict)  # earliest process start

    def start_of(self, seen: Seen) -> float | None:
        """When `seen` began as far as the agent knows: a process interval, its processes'
        earliest start; an allocation, that of its owner's processes on the node."""
        return seen.started if seen.source == PROCESS else self.starts.get(seen.owner)


def owner_key(owner: dict[str, Any]) -> OwnerKey:
    """An owner's stable identity within its site. Pods go by namespace/pod where a name is
    known (the scheduler's allocation names them), else by UID (a process's cgroup)."""
    kind = str(owner["kind"])
    if kind == "slurm":
        return kind, str(owner["job"])
    if kind == "container":
        return kind, str(owner["container_id"])
    if kind == "user":
        return kind, str(owner["uid"])
    namespace, pod = owner.get("namespace"), owner.get("pod")
    if namespace or pod:
        return kind, f"{namespace or ''}/{pod or ''}"
    if owner.get("pod_uid"):
        return kind, str(owner["pod_uid"])
    if owner.get("container_id"):
        return kind, f"container {owner['container_id']}"
    return kind, "unknown pod"


def snapshots_of(
    node_id: int, site_id: int, entries: list[dict[str, Any]], allocated_by: str = SCHEDULER
) -> list[Snapshot]:
    """A batch's validated `workloads` entries as one snapshot per time, oldest first; their
    allocations' source is `allocated_by` (SCHEDULER from an agent, EXPORTER from a pull)."""
    by_ts: dict[float, Snapshot] = {}
    for entry in entries:
        ts = float(entry["ts"])
        snap = by_ts.get(ts)
        if snap is None:
            snap = by_ts[ts] = Snapshot(node_id, site_id, ts)
        _add_entry(snap, entry, allocated_by)
    return [by_ts[ts] for ts in sorted(by_ts)]


def _add_entry(snap: Snapshot, entry: dict[str, Any], allocated_by: str) -> None:
    gpu, mig = int(entry["gpu"]), str(entry.get("mig") or "")
    allocation = entry["allocation"]
    if allocation is not None:
        snap.seen.append(Seen(gpu, mig, _owner(snap, allocation), allocated_by))
    # An owner's processes on one GPU are one interval: lowest PID, memory added up.
    pids: dict[OwnerKey, int] = {}
    memory: dict[OwnerKey, float | None] = {}
    starts: dict[OwnerKey, float] = {}
    sm: dict[OwnerKey, float] = {}
    for process in entry["processes"]:
        key = _owner(snap, process["owner"])
        pids[key] = min(pids.get(key, process["pid"]), process["pid"])
        if process.get("sm_pct") is not None:
            sm[key] = sm.get(key, 0.0) + float(process["sm_pct"])
        held = process.get("memory_mib")
        if held is not None or key not in memory:
            memory[key] = None if held is None else (memory.get(key) or 0.0) + held
        if process.get("started") is not None:
            started = float(process["started"])
            starts[key] = min(starts.get(key, started), started)
            snap.starts[key] = min(snap.starts.get(key, started), started)
    for key, pid in pids.items():
        snap.seen.append(
            Seen(gpu, mig, key, PROCESS, pid, memory[key], starts.get(key), sm.get(key))
        )


def _owner(snap: Snapshot, owner: dict[str, Any]) -> OwnerKey:
    key = owner_key(owner)
    known = snap.owners.setdefault(key, {})
    for name in FIELDS:
        if owner.get(name) is not None:
            known[name] = owner[name]
    return key


# -- storing ------------------------------------------------------------------------------


def store_workloads(tx: Tx, snapshots: Sequence[Snapshot]) -> None:
    """Apply `snapshots` (of any nodes, in any order) inside `tx`."""
    for generation in _generations(snapshots):
        previous = _previous(tx, generation)
        current = _advance(tx, generation)
        if not current:
            continue
        ids = _workload_ids(tx, current)
        _open_or_bump(tx, current, ids, previous)
        _add_shares(tx, current, ids)
        _close_absent(tx, sorted(s.node_id for s in current))


def _generations(snapshots: Sequence[Snapshot]) -> Iterator[list[Snapshot]]:
    """Each node's snapshots in time order, one per node per generation: the first
    generation holds every node's oldest, and so on (one, nearly always)."""
    per_node: dict[int, dict[float, Snapshot]] = {}
    for snap in snapshots:
        per_node.setdefault(snap.node_id, {}).setdefault(snap.ts, snap)  # a resend: once
    ordered = [[byts[ts] for ts in sorted(byts)] for _, byts in sorted(per_node.items())]
    depth = max((len(snaps) for snaps in ordered), default=0)
    for k in range(depth):
        yield [snaps[k] for snaps in ordered if k < len(snaps)]


_PREVIOUS = "SELECT node_id, ts FROM fleet_workloadsnapshot WHERE node_id IN ({rows})"


def _previous(tx: Tx, generation: list[Snapshot]) -> dict[int, float]:
    """Each node's last snapshot before these, for the nodes whose snapshots carry process
    starts (none from an agent that sends no start: no statement). On PostgreSQL the marks
    are locked first, so that a second writer of the node waits here rather than moving the
    mark between this read and `_advance` (SQLite's write lock is held since BEGIN)."""
    nodes = sorted(s.node_id for s in generation if s.starts)
    if not nodes:
        return {}
    sql = _PREVIOUS + (" FOR UPDATE" if tx.vendor == "postgresql" else "")
    found: dict[int, float] = {}
    for statement, params in _chunked(tx.vendor, sql, [(n,) for n in nodes], ("int",)):
        found.update((int(row[0]), float(row[1])) for row in tx.execute(statement, params))
    return found


_ADVANCE = (
    "INSERT INTO fleet_workloadsnapshot (node_id, ts) {rows}"
    " ON CONFLICT (node_id) DO UPDATE SET ts = excluded.ts"
    " WHERE excluded.ts > fleet_workloadsnapshot.ts RETURNING node_id"
)


def _advance(tx: Tx, generation: list[Snapshot]) -> list[Snapshot]:
    """The snapshots newer than their node's last one; each node's mark moves to them.
    The mark's row lock also keeps two writers of one node (a reconnect to the other
    server process) from interleaving their intervals."""
    rows = [(s.node_id, s.ts) for s in generation]  # in node order: no deadlock
    advanced: set[int] = set()
    for sql, params in _chunked(tx.vendor, _ADVANCE, rows, _NODE_TS):
        advanced.update(int(row[0]) for row in tx.execute(sql, params))
    return [s for s in generation if s.node_id in advanced]


# Quoted: `user` is a reserved word in PostgreSQL.
_COLUMNS = ", ".join(f'"{name}"' for name in FIELDS)


def _workload_ids(tx: Tx, current: list[Snapshot]) -> dict[tuple[int, str, str], int]:
    """(site, kind, key) → workload id for every owner named, creating those that are new
    and filling in fields learned since (a Slurm job's account, say)."""
    wanted: dict[tuple[int, str, str], dict[str, Any]] = {}
    first_seen: dict[tuple[int, str, str], float] = {}
    for snap in current:
        for (kind, key), fields in snap.owners.items():
            wanted.setdefault((snap.site_id, kind, key), {}).update(fields)
            first_seen.setdefault((snap.site_id, kind, key), snap.ts)
    keys = sorted(wanted)
    stored = _select_workloads(tx, keys)
    missing = [k for k in keys if k not in stored]
    if missing:
        rows = [(*k, *_field_values(wanted[k]), first_seen[k]) for k in missing]
        sql = (
            f"INSERT INTO fleet_workload (site_id, kind, key, {_COLUMNS}, first_seen)"
            " {rows} ON CONFLICT (site_id, kind, key) DO NOTHING"
        )
        for statement, params in _chunked(tx.vendor, sql, rows, _WORKLOAD):
            tx.execute(statement, params)
        stored |= _select_workloads(tx, missing)
    _update_fields(tx, wanted, stored)
    return {k: row[0] for k, row in stored.items()}


def _select_workloads(tx: Tx, keys: list[tuple[int, str, str]]) -> dict[tuple[int, str, str], Row]:
    sql = (
        f"SELECT site_id, kind, key, id, {_COLUMNS} FROM fleet_workload"
        " WHERE (site_id, kind, key) IN ({rows})"
    )
    found: dict[tuple[int, str, str], Row] = {}
    for statement, params in _chunked(tx.vendor, sql, keys, _WORKLOAD_KEY):
        for row in tx.execute(statement, params):
            found[(int(row[0]), str(row[1]), str(row[2]))] = tuple(row[3:])
    return found


def _field_values(fields: dict[str, Any]) -> Row:
    """The row's columns: text fields '' when unknown (as Django stores a blank), uid NULL."""
    return tuple(fields.get(name, None if name == "uid" else "") for name in FIELDS)


def _update_fields(
    tx: Tx,
    wanted: dict[tuple[int, str, str], dict[str, Any]],
    stored: dict[tuple[int, str, str], Row],
) -> None:
    """A field the agent now reports, or reports changed, replaces the stored one; one it
    leaves out keeps what was stored. Rare: the usual snapshot updates no workload."""
    changes = []
    for key, fields in wanted.items():
        row = stored[key]
        old = dict(zip(FIELDS, row[1:], strict=True))
        new = old | fields
        if new != old:
            changes.append((*_field_values(new), row[0]))
    if changes:
        assignments = ", ".join(f'"{name}" = %s' for name in FIELDS)
        tx.execute_many(f"UPDATE fleet_workload SET {assignments} WHERE id = %s", changes)


_OPEN_OR_BUMP = (
    "INSERT INTO fleet_gpuallocation (site_id, node_id, gpu, mig, workload_id, source,"
    " started, last_seen, pid, memory_mib) {rows}"
    " ON CONFLICT (node_id, gpu, mig, workload_id, source) WHERE ended IS NULL"
    " DO UPDATE SET last_seen = excluded.last_seen, memory_mib = CASE"
    " WHEN fleet_gpuallocation.memory_mib IS NULL"
    " OR excluded.memory_mib > fleet_gpuallocation.memory_mib"
    " THEN excluded.memory_mib ELSE fleet_gpuallocation.memory_mib END"
)


def _open_or_bump(
    tx: Tx,
    current: list[Snapshot],
    ids: dict[tuple[int, str, str], int],
    previous: dict[int, float],
) -> None:
    rows: dict[tuple[int, int, str, int, str], Row] = {}
    for snap in current:
        for seen in snap.seen:
            workload = ids[(snap.site_id, *seen.owner)]
            key = (snap.node_id, seen.gpu, seen.mig, workload, seen.source)
            # `started` counts only where this opens the interval (an open one keeps its own).
            started = _opened_at(snap.start_of(seen), previous.get(snap.node_id), snap.ts)
            # The validator refuses two entries for one GPU at one time: a key repeats
            # only within one entry, where _add_entry already merged it.
            rows[key] = (snap.site_id, *key, started, snap.ts, seen.pid, seen.memory_mib)
    # In key order: two writers lock the rows they share in the same order.
    ordered = [rows[k] for k in sorted(rows)]
    for sql, params in _chunked(tx.vendor, _OPEN_OR_BUMP, ordered, _ALLOCATION):
        tx.execute(sql, params)


def _opened_at(start: float | None, previous: float | None, ts: float) -> float:
    """When an interval first listed by the snapshot at `ts` began: its processes' start,
    not after `ts` (the two are read apart and rounded apart). The node's previous snapshot
    did not list it (it would be open): a start before that one says only that the process
    came onto the GPU later, between the two, so midway, as an end is placed. No start
    known (an agent that sends none): `ts`, the first snapshot that lists it."""
    if start is None:
        return ts
    if previous is not None and start <= previous:
        return (previous + ts) / 2
    return min(start, ts)


_CLOSE_ABSENT = (
    "UPDATE fleet_gpuallocation SET ended = (last_seen + ({mark})) / 2"
    " WHERE ended IS NULL AND node_id IN ({nodes}) AND last_seen < ({mark})"
).replace(
    "{mark}",
    "SELECT w.ts FROM fleet_workloadsnapshot w WHERE w.node_id = fleet_gpuallocation.node_id",
)


def _close_absent(tx: Tx, nodes: list[int]) -> None:
    """Close what the nodes' snapshots (their marks, just moved) no longer list, midway
    between the last snapshot that listed it and the mark: every interval they still show
    was bumped to the snapshot's time a statement ago."""
    per_stmt = _SQLITE_MAX_PARAMS
    for start in range(0, len(nodes), per_stmt):
        chunk = nodes[start : start + per_stmt]
        tx.execute(_CLOSE_ABSENT.replace("{nodes}", ", ".join(["%s"] * len(chunk))), chunk)


_ADD_SHARES = (
    f"INSERT INTO {SHARE_TABLE} (bucket, node_id, gpu, workload_id, sm_sum, samples) {{rows}}"
    " ON CONFLICT (bucket, node_id, gpu, workload_id) DO UPDATE"
    f" SET sm_sum = {SHARE_TABLE}.sm_sum + excluded.sm_sum,"
    f" samples = {SHARE_TABLE}.samples + excluded.samples"
)


def _add_shares(tx: Tx, current: list[Snapshot], ids: dict[tuple[int, str, str], int]) -> None:
    """Each workload's SM activity on a GPU that processes of two or more workloads share,
    added to its minute (`fw_gpu_share_1m`). Only snapshots that advanced their node's mark
    come here, so a resend adds nothing twice. A GPU's MIG devices count as one GPU (the
    ledger splits the GPU's energy); a workload without SM activity (NVML reports none on
    MIG devices) writes no row, and the ledger then splits that minute by time."""
    rows: list[Row] = []
    for snap in current:
        bucket = math.floor(snap.ts / 60.0) * 60
        sharing: dict[int, set[int]] = {}
        active: dict[tuple[int, int], float] = {}
        for seen in snap.seen:
            if seen.source != PROCESS:
                continue
            workload = ids[(snap.site_id, *seen.owner)]
            sharing.setdefault(seen.gpu, set()).add(workload)
            if seen.sm_pct is not None:
                key = (seen.gpu, workload)
                active[key] = active.get(key, 0.0) + seen.sm_pct
        for (gpu, workload), sm_sum in sorted(active.items()):
            if len(sharing[gpu]) >= 2:
                rows.append((bucket, snap.node_id, gpu, workload, sm_sum, 1))
    # one row per key per statement (a node has one snapshot per generation), in key order
    rows.sort()
    for sql, params in _chunked(tx.vendor, _ADD_SHARES, rows, _SHARE):
        tx.execute(sql, params)


def _chunked(
    vendor: str, sql: str, rows: Sequence[Sequence[Any]], types: tuple[str, ...]
) -> Iterator[tuple[str, Row]]:
    """`sql` with its `{rows}` bound to `rows`, as many per statement as SQLite may bind."""
    per_stmt = max(1, _SQLITE_MAX_PARAMS // len(types))
    for start in range(0, len(rows), per_stmt):
        source, params = rows_source(vendor, types, rows[start : start + per_stmt])
        yield sql.replace("{rows}", source), params
