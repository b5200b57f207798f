"""Each node's InfiniBand/RoCE ports (fleet/models/fabric.py), and the events their changes
make, stored in the commit that stores the batch (`fleet.storage.samples.write_samples`).

Per port, a read newer than the stored one replaces its state and counters and adds each
counter's rise to `rises` (since the port was first seen). Two changes are events
(`fleet_event`, node-scoped, in the same commit):

- `link_flap`: `link_downed` rose (the link failed to retrain and went down, however briefly;
  between two reads it may have come back, so the counter is the only witness);
- `link_down`: the port's state left ACTIVE.

A read not newer than the stored one (a resent batch, or one older than what is stored)
changes nothing and makes no event, and the events are keyed by the batch's source, seq and
a position past any event the agent sent (`fleet_event`'s unique key): a resend stores once.

A counter that reads less than before was reset (a reboot, `perfquery -R`): what it reads
now is all rise, and a reset `link_downed` that reads 0 is no flap.

Each applied read also keeps what the fabric rules judge (fleet/health/fabric.py), so the
rule pass reads one row per port and no history: `last_active`, the newest read that found
the port ACTIVE, and the two rate checkpoints (`rate_base`, `rate_next`), rolled every
`RATE_WINDOW_S`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from agents.protocol import MAX_EVENTS_PER_BATCH
from agents.protocol.fabric import ACTIVE, TEXT_KEYS
from fleet.health.fabric import Checkpoint, port_name, roll
from fleet.storage.db import Row, Tx
from fleet.storage.dialect import json_param

LINK_FLAP = "link_flap"
LINK_DOWN = "link_down"
FLAP_COUNTER = "link_downed"
# Events this module makes are numbered past any position an agent's own events can hold.
FIRST_POS = MAX_EVENTS_PER_BATCH

_COLUMNS = (
    "ts", "first_seen", *TEXT_KEYS, "counters", "rises", "last_active", "rate_base", "rate_next"
)  # fmt: skip


@dataclass(slots=True)
class FabricWrite:
    """One batch's `fabric` entries for one node, and the batch that carried them."""

    node_id: int
    source: str
    seq: int
    entries: list[dict[str, Any]]


@dataclass(slots=True)
class Stored:
    ts: float
    first_seen: float
    text: dict[str, str]
    counters: dict[str, int]
    rises: dict[str, int]
    last_active: float | None = None
    base: Checkpoint | None = None
    nxt: Checkpoint | None = None


Key = tuple[int, str, int]  # node, device, port


def store_fabric(tx: Tx, writes: list[FabricWrite]) -> None:
    """Apply each batch's port reads in time order; upsert the ports they changed and insert
    the events they made."""
    stored = _stored(tx, sorted({w.node_id for w in writes}))
    changed: set[Key] = set()
    events: list[Row] = []
    for write in writes:
        made = 0
        for entry in sorted(write.entries, key=lambda e: float(e["ts"])):
            key = (write.node_id, str(entry["device"]), int(entry["port"]))
            old = stored.get(key)
            if old is not None and float(entry["ts"]) <= old.ts:
                continue
            new = _applied(old, entry)
            for kind, code, detail in changes(old, new, key[1], key[2]):
                events.append(
                    (write.source, write.seq, FIRST_POS + made, new.ts, write.node_id, None,
                     kind, code, detail)
                )  # fmt: skip
                made += 1
            stored[key] = new
            changed.add(key)
    if changed:
        _upsert(tx, [(key, stored[key]) for key in sorted(changed)])
    if events:
        tx.insert_events(events)


def changes(old: Stored | None, new: Stored, device: str, port: int) -> list[tuple[str, int, str]]:
    """The events between two reads of a port: (kind, code, detail). A port seen for the
    first time makes none: its counters' past is not this server's to judge."""
    if old is None:
        return []
    made: list[tuple[str, int, str]] = []
    rise = _rise(old.counters.get(FLAP_COUNTER), new.counters.get(FLAP_COUNTER))
    if rise:
        before, after = old.counters[FLAP_COUNTER], new.counters[FLAP_COUNTER]
        made.append(
            (LINK_FLAP, rise, f"{port_name(device, port)}: {FLAP_COUNTER} {before} → {after}")
        )
    was, now = old.text.get("state"), new.text.get("state")
    if was == ACTIVE and now is not None and now != ACTIVE:
        made.append((LINK_DOWN, 0, f"{port_name(device, port)}: {was} → {now}"))
    return made


def _rise(before: int | None, after: int | None) -> int:
    """How much a counter rose between two reads: after a reset, all of what it reads."""
    if after is None:
        return 0
    if before is None or after < before:
        return after if before is not None else 0
    return after - before


def _applied(old: Stored | None, entry: dict[str, Any]) -> Stored:
    ts = float(entry["ts"])
    counters = {str(k): int(v) for k, v in entry["counters"].items()}
    text = {key: str(entry[key]) for key in TEXT_KEYS if key in entry}
    active = ts if text.get("state") == ACTIVE else None
    if old is None:
        rises = {name: 0 for name in counters}
        base, nxt = roll(None, None, ts, rises)
        return Stored(ts, ts, text, counters, rises, active, base, nxt)
    rises = dict(old.rises)
    for name, value in counters.items():
        rises[name] = rises.get(name, 0) + _rise(old.counters.get(name), value)
    base, nxt = roll(old.base, old.nxt, ts, rises)
    last_active = active if active is not None else old.last_active
    return Stored(ts, old.first_seen, text, counters, rises, last_active, base, nxt)


def _stored(tx: Tx, node_ids: list[int]) -> dict[Key, Stored]:
    if not node_ids:
        return {}
    marks = ",".join(["%s"] * len(node_ids))
    rows = tx.execute(
        f"SELECT node_id, device, port, {', '.join(_COLUMNS)} FROM fleet_fabricport"
        f" WHERE node_id IN ({marks})",
        node_ids,
    )
    out: dict[Key, Stored] = {}
    for node_id, device, port, ts, first_seen, *rest in rows:
        words, json_cols = rest[: len(TEXT_KEYS)], rest[len(TEXT_KEYS) :]
        counters, rises, last_active, base, nxt = json_cols
        text = {k: str(v) for k, v in zip(TEXT_KEYS, words, strict=True) if v}
        out[(int(node_id), str(device), int(port))] = Stored(
            float(ts),
            float(first_seen),
            text,
            _json(counters),
            _json(rises),
            None if last_active is None else float(last_active),
            Checkpoint.of(_decoded(base)),
            Checkpoint.of(_decoded(nxt)),
        )
    return out


def _upsert(tx: Tx, rows: list[tuple[Key, Stored]]) -> None:
    jp = json_param(tx.vendor)
    columns = ("node_id", "device", "port", *_COLUMNS)
    values = ", ".join(["%s"] * (len(columns) - 5) + [jp, jp, "%s", jp, jp])
    updated = ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS if c != "first_seen")
    sql = (
        f"INSERT INTO fleet_fabricport ({', '.join(columns)}) VALUES ({values})"
        f" ON CONFLICT (node_id, device, port) DO UPDATE SET {updated}"
    )
    tx.execute_many(
        sql,
        [
            (
                *key,
                port.ts,
                port.first_seen,
                *(port.text.get(k, "") for k in TEXT_KEYS),
                orjson.dumps(port.counters).decode(),
                orjson.dumps(port.rises).decode(),
                port.last_active,
                _checkpoint_json(port.base),
                _checkpoint_json(port.nxt),
            )
            for key, port in rows
        ],
    )


def _decoded(value: Any) -> Any:
    """A JSON column as read: PostgreSQL's jsonb arrives decoded, SQLite's as text."""
    return orjson.loads(value) if isinstance(value, (str, bytes)) else value


def _json(value: Any) -> dict[str, int]:
    value = _decoded(value)
    return {str(k): int(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _checkpoint_json(point: Checkpoint | None) -> str:
    return orjson.dumps(point.as_json() if point is not None else {}).decode()
