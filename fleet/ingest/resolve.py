"""From a validated batch to what storage writes: who may write what, and names → ids.

`Connection` is what the server told the child about an agent connection (its
source and token); `authorize` checks a batch against it; `Resolver` turns names
on the wire into inventory row ids and builds the batch's `SampleWrite`: samples
keyed by entity, events, and the statements that keep GPU and node info current.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import orjson

from agents.protocol import MAX_GPUS_PER_NODE
from agents.protocol.validate import Batch, ProtocolError
from fleet.health.limits import STORED_LIMITS, reported_column
from fleet.ingest.inventory import RELOAD_MIN_S, Inventory
from fleet.ingest.tally import UNKNOWN_GPU_FIELD, writer_statement
from fleet.storage.db import Database, Row
from fleet.storage.dialect import POSTGRESQL, json_param
from fleet.storage.fabric import FabricWrite
from fleet.storage.samples import SampleWrite
from fleet.storage.workloads import snapshots_of

# Which sample kinds each source kind may write (docs/protocol.md, "Sources and tokens").
ALLOWED_KINDS: dict[str, frozenset[str]] = {
    "node": frozenset({"gpu", "node"}),
    "rack": frozenset({"rack", "feed"}),
    "loop": frozenset({"loop"}),
    "site": frozenset({"rack", "feed", "loop", "facility"}),
}

# What the database's BIGINT holds: a larger seq would be acked and then break every
# later save of the source's bookkeeping, so it is refused up front.
MAX_SEQ = 2**63 - 1


@dataclass(slots=True)
class Connection:
    source: str
    kind: str
    name: str
    site_id: int
    token_hash: str


def authorize(conn: Connection, batch: Batch) -> None:
    if batch.source != conn.source:
        raise ProtocolError(403, "source", f"this token writes {conn.source}, not {batch.source}")
    allowed = ALLOWED_KINDS[conn.kind]
    for kind, samples in batch.samples.items():
        if samples and kind not in allowed:
            raise ProtocolError(403, kind, f"a {conn.kind} source may not write {kind} samples")
    if conn.kind != "node" and (batch.gpu_info or batch.node_info):
        raise ProtocolError(403, "gpu_info", "only a node source describes GPUs")
    if batch.seq > MAX_SEQ:
        raise ProtocolError(400, "seq", f"must be at most {MAX_SEQ} (a 64-bit integer)")


def to_json(value: Any, where: str) -> str:
    """Serialise a free-form block now, so one that cannot be stored (nested beyond
    orjson's 255 levels, say) is this batch's 400 and never a later save's failure."""
    try:
        return orjson.dumps(value).decode()
    except (orjson.JSONEncodeError, TypeError, RecursionError) as exc:
        raise ProtocolError(400, where, f"cannot be stored: {exc}") from None


class Resolver:
    def __init__(self, db: Database, inventory: Inventory) -> None:
        self.db = db
        self.inventory = inventory
        # GPUs this round's earlier batches add per node (not committed yet): the bound
        # counts them, so batches of one round cannot together pass it.
        self.round_new_gpus: dict[int, set[int]] = {}

    def begin_round(self) -> None:
        self.round_new_gpus = {}

    def resolve(self, conn: Connection, batch: Batch) -> tuple[SampleWrite, ProtocolError | None]:
        """Names on the wire → row ids; raises (storing nothing of this batch) on any miss.
        Samples and events of GPUs the node's inventory lacks are left out, and the second
        item names them (the batch is acknowledged with that refusal: docs/protocol.md)."""
        out = SampleWrite()
        if conn.kind == "node":
            node_id = self._node_id(conn)
            gpus = batch.samples.get("gpu") or []
            events = _events(batch, node_id)
            gpus, events, left_out = self._known_gpus_only(conn, node_id, gpus, events, out)
            if gpus:
                out.add_samples("gpu", [((node_id, s["gpu"]), s) for s in gpus])
            nodes = batch.samples.get("node")
            if nodes:
                out.add_samples("node", [((node_id,), s) for s in nodes])
            out.events = events
            out.statements.extend(self._info_statements(node_id, batch))
            site_id = self.inventory.nodes[conn.name].site_id
            out.workloads = snapshots_of(node_id, site_id, batch.workloads)
            if batch.fabric:
                out.fabric = [FabricWrite(node_id, batch.source, batch.seq, batch.fabric)]
            return out, left_out
        for kind in ("rack", "feed", "loop"):
            samples = batch.samples.get(kind)
            if samples:
                out.add_samples(kind, [((self._entity_id(conn, kind, s),), s) for s in samples])
        facility = batch.samples.get("facility")
        if facility:
            out.add_samples("facility", [((conn.site_id,), s) for s in facility])
        out.events = _events(batch, None)
        return out, None

    def _known_gpus_only(
        self,
        conn: Connection,
        node_id: int,
        gpus: list[dict[str, Any]],
        events: list[Row],
        out: SampleWrite,
    ) -> tuple[list[dict[str, Any]], list[Row], ProtocolError | None]:
        """The samples and events of GPUs the node's inventory has (or an admin accepted),
        and the refusal of the rest, counted for the admin in the batch's own commit. One
        set comparison per batch against the inventory's cache in the usual case."""
        wanted = {s["gpu"] for s in gpus} | {ev[_EVENT_GPU] for ev in events}
        wanted.discard(None)
        admitted = self.inventory.admitted_gpus(self.db, node_id, wanted)
        if wanted <= admitted:
            return gpus, events, None
        refusal = unknown_gpus(conn.name, gpus, events, admitted)
        now = time.time()
        out.statements.append(
            writer_statement(conn.source, UNKNOWN_GPU_FIELD, refusal.reason, now, self.db.vendor)
        )
        kept_gpus = [s for s in gpus if s["gpu"] in admitted]
        kept_events = [ev for ev in events if ev[_EVENT_GPU] is None or ev[_EVENT_GPU] in admitted]
        return kept_gpus, kept_events, refusal

    def _node_id(self, conn: Connection) -> int:
        ref = self.inventory.nodes.get(conn.name)
        if ref is not None:
            return ref.id
        if not self.inventory.maybe_reload(self.db):
            raise _not_read_yet(f"node {conn.name}")
        ref = self.inventory.nodes.get(conn.name)
        if ref is None:
            raise ProtocolError(403, "source", f"node {conn.name} is not in the inventory")
        return ref.id

    def _entity_id(self, conn: Connection, kind: str, sample: dict[str, Any]) -> int:
        if kind == "loop":
            return self._lookup_loop(conn, sample["loop"])
        rack_id = self._lookup_rack(conn, sample["rack"])
        if kind == "rack":
            return rack_id
        what = f"feed {sample['rack']}/{sample['feed']}"
        return self._lookup(self.inventory.feeds, (rack_id, sample["feed"]), what)

    def _lookup_rack(self, conn: Connection, name: str) -> int:
        if conn.kind == "rack" and conn.name.split("/", 1)[-1] != name:
            raise ProtocolError(403, "rack", f"this token writes rack {conn.name}, not {name}")
        return self._lookup(self.inventory.racks, (conn.site_id, name), f"rack {name}")

    def _lookup_loop(self, conn: Connection, name: str) -> int:
        if conn.kind == "loop" and conn.name.split("/", 1)[-1] != name:
            raise ProtocolError(403, "loop", f"this token writes loop {conn.name}, not {name}")
        return self._lookup(self.inventory.loops, (conn.site_id, name), f"loop {name}")

    def _lookup(self, table: dict[tuple[int, str], int], key: tuple[int, str], what: str) -> int:
        found = table.get(key)
        if found is not None:
            return found
        if not self.inventory.maybe_reload(self.db):
            raise _not_read_yet(what)
        found = table.get(key)
        if found is None:
            raise ProtocolError(400, what.split()[0], f"{what} is not in this site's inventory")
        return found

    def _info_statements(self, node_id: int, batch: Batch) -> list[tuple[str, Row]]:
        statements: list[tuple[str, Row]] = []
        jp = json_param(self.db.vendor)
        if batch.node_info is not None:
            merged = {**self._node_info(node_id), **batch.node_info}
            statements.append(
                (
                    f"UPDATE fleet_node SET info = {jp} WHERE id = %s",
                    (to_json(merged, "node_info"), node_id),
                )
            )
        if batch.gpu_info:
            self._check_gpu_count(node_id, batch)
        discovered = discovered_at_param(self.db.vendor, time.time())
        for i, info in enumerate(batch.gpu_info):
            statements.append(_gpu_upsert(node_id, info, jp, f"gpu_info[{i}]", discovered))
        return statements

    def _node_info(self, node_id: int) -> dict[str, Any]:
        """What the node's agent reported before: a `node_info` updates the keys it carries
        (an agent sends `agent_version` once, then only what changed, e.g. `tuning`)."""
        rows = self.db.query("SELECT info FROM fleet_node WHERE id = %s", (node_id,))
        raw = rows[0][0] if rows else None
        if isinstance(raw, str):
            try:
                raw = orjson.loads(raw)
            except orjson.JSONDecodeError:
                return {}
        return raw if isinstance(raw, dict) else {}

    def _check_gpu_count(self, node_id: int, batch: Batch) -> None:
        """A node's GPU rows (the inventory's and those agents described) stay within
        MAX_GPUS_PER_NODE: a node token cannot grow the inventory without bound. Only
        batches that carry gpu_info (an agent's start, or a change) pay for the query."""
        rows = self.db.query('SELECT "index" FROM fleet_gpu WHERE node_id = %s', (node_id,))
        known = {index for (index,) in rows} | self.round_new_gpus.get(node_id, set())
        new = {info["gpu"] for info in batch.gpu_info} - known
        if len(known) + len(new) > MAX_GPUS_PER_NODE:
            raise ProtocolError(
                400,
                "gpu_info",
                f"the node has {len(known)} GPUs and this batch adds {len(new)}; a node has "
                f"at most {MAX_GPUS_PER_NODE} (remove stale GPUs in the admin)",
            )
        self.round_new_gpus.setdefault(node_id, set()).update(new)


# What an agent's gpu_info writes: its own description and the limits it reported, never the
# limits entered in the inventory (fleet/health/limits.py: those are in force where set).
_REPORTED_LIMITS = tuple(reported_column(name) for name in STORED_LIMITS)


def _kept_reported(column: str) -> str:
    """A limit left out of gpu_info keeps the value the agent reported before (an agent
    never erases a limit), unless the GPU is another device now: a new UUID's limits are
    its own."""
    swapped = "excluded.uuid <> '' AND fleet_gpu.uuid <> '' AND excluded.uuid <> fleet_gpu.uuid"
    return (
        f"{column} = CASE WHEN {swapped} THEN excluded.{column}"
        f" ELSE COALESCE(excluded.{column}, fleet_gpu.{column}) END"
    )


_GPU_UPDATE = ", ".join(
    [
        "uuid = excluded.uuid",
        "model = excluded.model",
        *(_kept_reported(column) for column in _REPORTED_LIMITS),
        "info = excluded.info",
    ]
)


def discovered_at_param(vendor: str, now: float) -> object:
    """`now` as the GPU row's discovered_at, in the form Django reads back on each engine
    (SQLite: UTC text; PostgreSQL: an aware datetime)."""
    moment = dt.datetime.fromtimestamp(now, dt.UTC)
    if vendor == POSTGRESQL:
        return moment
    return moment.replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")


def _gpu_upsert(
    node_id: int, info: dict[str, Any], jp: str, where: str, discovered: object
) -> tuple[str, Row]:
    """An upsert: another writer or the admin may have created the GPU row already. A
    row it creates is one the inventory did not have: marked discovered, for an admin to
    accept; an existing row keeps its discovered/accepted marks."""
    raw_limits = info.get("limits")
    limits: dict[str, Any] = raw_limits if isinstance(raw_limits, dict) else {}
    values = (
        str(info.get("uuid", ""))[:64],
        str(info.get("model", ""))[:100],
        *(_num(limits.get(name)) for name in STORED_LIMITS),
        to_json(info, where),
    )
    reported = ", ".join(_REPORTED_LIMITS)
    marks = ", ".join(["%s"] * len(_REPORTED_LIMITS))
    sql = (
        f'INSERT INTO fleet_gpu (uuid, model, {reported}, info, node_id, "index",'
        " discovered_at, accepted_by)"
        f" VALUES (%s, %s, {marks}, {jp}, %s, %s, %s, '')"
        f' ON CONFLICT (node_id, "index") DO UPDATE SET {_GPU_UPDATE}'
    )
    return sql, (*values, node_id, info["gpu"], discovered)


def unknown_gpus(
    node: str, samples: list[dict[str, Any]], events: list[Row], admitted: frozenset[int]
) -> ProtocolError:
    """The refusal of the samples and events of GPUs not in `node`'s inventory: the field
    is the first one naming such a GPU, the reason names the indexes and what was left out."""
    bad_samples = [i for i, s in enumerate(samples) if s["gpu"] not in admitted]
    bad_events = [
        ev for ev in events if ev[_EVENT_GPU] is not None and ev[_EVENT_GPU] not in admitted
    ]
    unknown = {samples[i]["gpu"] for i in bad_samples} | {ev[_EVENT_GPU] for ev in bad_events}
    if bad_samples:
        field = f"gpu[{bad_samples[0]}].gpu"
    else:
        field = f"events[{bad_events[0][_EVENT_POS]}].gpu"
    parts = [(len(bad_samples), "sample"), (len(bad_events), "event")]
    what = " and ".join(_count(n, noun) for n, noun in parts if n)
    reason = (
        f"{_gpu_list(sorted(unknown))} not in the inventory of node {node}: {what} not stored"
        " (add it to the inventory, or accept it in the admin: GPUs, awaiting acceptance)"
    )
    return ProtocolError(400, field, reason)


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def _gpu_list(indexes: list[int]) -> str:
    """`GPU 8 is`, `GPUs 8, 9 are`, or `GPUs 8, 9, 10, 11, … (1,016: 8–1023) are`."""
    if len(indexes) == 1:
        return f"GPU {indexes[0]} is"
    shown = ", ".join(map(str, indexes[:4]))
    if len(indexes) > 4:
        shown += f", … ({len(indexes):,}: {indexes[0]}–{indexes[-1]})"
    return f"GPUs {shown} are"


# Positions in an event row (`_events`, fleet.storage.db.EVENT_SQL_COLUMNS).
_EVENT_POS = 2
_EVENT_GPU = 5


def _events(batch: Batch, node_id: int | None) -> list[Row]:
    return [
        (
            batch.source,
            batch.seq,
            pos,
            float(ev["ts"]),
            node_id,
            ev.get("gpu"),
            str(ev["kind"]),
            ev.get("code"),
            str(ev.get("detail", ""))[:2000],
        )
        for pos, ev in enumerate(batch.events)
    ]


def _num(value: Any) -> float | None:
    return float(value) if type(value) in (int, float) else None


def _not_read_yet(what: str) -> ProtocolError:
    """A name this writer has not seen, while its inventory was read under RELOAD_MIN_S ago
    (for another miss): the entity may have been added since, so the batch is answered
    "resend later" (503), never refused — an agent stops on 403, drops the batch on 400.
    The resend comes after the next read, which settles it either way."""
    return ProtocolError(
        HTTPStatus.SERVICE_UNAVAILABLE,
        what.split()[0] if not what.startswith("node ") else "source",
        f"{what} is not in the inventory as this server last read it, under "
        f"{RELOAD_MIN_S:g} s ago: resend",
    )
