"""What the ingest writer does with a group of batches: parse, validate,
authorize, resolve names, store in one commit, and keep the latest state.

Pure logic over a `Store`, no sockets: `writer_process.py` feeds it frames and
tests can drive it directly.
"""

from __future__ import annotations

import logging
import operator
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from agents.protocol import parse_source
from agents.protocol.metrics import METRICS
from agents.protocol.validate import Batch, ProtocolError, validate_batch
from fleet.ingest.inventory import GpuLimits, Inventory
from fleet.ingest.store import Row, Store, latest_columns
from fleet.storage.schema import ENTITY_COLUMNS, latest_table

log = logging.getLogger("fleet.ingest.writer")

OK = 0

# Which sample kinds each source kind may write (docs/protocol.md, "Sources and tokens").
ALLOWED_KINDS: dict[str, frozenset[str]] = {
    "node": frozenset({"gpu", "node"}),
    "rack": frozenset({"rack", "feed"}),
    "loop": frozenset({"loop"}),
    "site": frozenset({"rack", "feed", "loop", "facility"}),
}

_METRIC_NAMES: dict[str, tuple[str, ...]] = {
    kind: tuple(m.name for m in metrics) for kind, metrics in METRICS.items()
}


@dataclass(slots=True)
class Connection:
    source: str
    kind: str
    name: str
    site_id: int
    token_hash: str


@dataclass(slots=True)
class Result:
    conn_id: int
    seq: int | None
    code: int  # 0 = stored; else 400/403
    error: dict[str, Any] | None = None


@dataclass
class SourceState:
    seq: int
    seen: float
    stats: dict[str, Any] | None


@dataclass
class WriterCore:
    store: Store
    inventory: Inventory = field(default_factory=Inventory)
    conns: dict[int, Connection] = field(default_factory=dict)
    # kind -> entity ids -> the newest sample, merged (slow fields keep their last value)
    latest: dict[str, dict[tuple[int, ...], dict[str, Any]]] = field(default_factory=dict)
    dirty: dict[str, set[tuple[int, ...]]] = field(default_factory=dict)  # since the last push
    unsaved: dict[str, set[tuple[int, ...]]] = field(default_factory=dict)  # since the last save
    save_interval_s: float = 2.0
    saved_at: float = 0.0
    sources: dict[str, SourceState] = field(default_factory=dict)
    stored_batches: int = 0

    def start(self) -> None:
        self.inventory.load(self.store)
        self._load_latest()

    # -- connections -------------------------------------------------------
    def hello(self, conn_id: int, source: str, site_id: int, token_hash: str = "") -> None:
        kind, name = parse_source(source)
        self.conns[conn_id] = Connection(source, kind, name, site_id, token_hash)

    def revoked_connections(self) -> list[Result]:
        """Connections whose token has been revoked since they connected (re-enrolled,
        or revoked by an admin): answered 401, so the server closes them with 4401."""
        if not self.conns:
            return []
        valid = {
            row[0]
            for row in self.store.execute(
                "SELECT token_hash FROM fleet_sourcetoken WHERE revoked = %s", (False,)
            )
        }
        gone = [cid for cid, conn in self.conns.items() if conn.token_hash not in valid]
        error = {"code": 401, "field": "authorization", "reason": "the token was revoked"}
        for cid in gone:
            self.conns.pop(cid, None)
        return [Result(cid, None, 401, error) for cid in gone]

    def bye(self, conn_id: int) -> None:
        self.conns.pop(conn_id, None)

    # -- batches -----------------------------------------------------------
    def process(self, frames: list[tuple[int, bytes]], now: float) -> list[Result]:
        """Validate every frame, store the good ones in one commit, answer each."""
        results: list[Result] = []
        accepted: list[tuple[int, Batch, Resolved]] = []
        for conn_id, payload in frames:
            conn = self.conns.get(conn_id)
            if conn is None:
                continue  # the connection went away; its agent will resend
            obj: Any = None
            try:
                obj = self._decode(payload)
                batch = validate_batch(obj, now)
            except ProtocolError as exc:
                results.append(Result(conn_id, _seq_of(obj), exc.code, exc.as_dict()))
                continue
            try:
                self._authorize(conn, batch)
                resolved = self._resolve(conn, batch)
            except ProtocolError as exc:
                results.append(Result(conn_id, batch.seq, exc.code, exc.as_dict()))
                continue
            accepted.append((conn_id, batch, resolved))
        if accepted:
            results.extend(self._store(accepted, now))
        return results

    def _store(self, accepted: list[tuple[int, Batch, Resolved]], now: float) -> list[Result]:
        """One commit for the round. If it fails, each batch is tried alone, so one batch
        the database refuses cannot take the round's other batches down with it: the
        refused one gets a final 400; if every one fails, the database itself is the
        problem and all get 503 (agents resend later)."""
        try:
            self._commit(accepted, now)
            return [Result(cid, b.seq, OK) for cid, b, _ in accepted]
        except Exception:
            if len(accepted) == 1:
                raise
            log.warning("commit of %d batches failed; retrying one by one", len(accepted))
        results: list[Result] = []
        failed: list[tuple[int, Batch, str]] = []
        for item in accepted:
            try:
                self._commit([item], now)
                results.append(Result(item[0], item[1].seq, OK))
            except Exception as exc:
                failed.append((item[0], item[1], exc.__class__.__name__))
        code = 503 if not results else 400
        for cid, batch, why in failed:
            reason = f"the database refused this batch ({why})"
            error = {"code": code, "field": "$", "reason": reason}
            results.append(Result(cid, batch.seq, code, error))
        return results

    def _commit(self, items: list[tuple[int, Batch, Resolved]], now: float) -> None:
        staged = Staged()
        for _, _, resolved in items:
            staged.add(resolved)
        # Late rows (an agent's spool after a partition) mark their minute for the
        # rollup to redo, in the same commit as the rows: a crash cannot split them.
        self.store.write(staged.rows(), staged.events, staged.extra + staged.rollup_marks())
        # Only what is committed changes what the writer remembers.
        for _, _, resolved in items:
            self.inventory.gpus.update(resolved.gpu_limits)
        self.stored_batches += len(items)
        self._remember(staged, [(cid, b) for cid, b, _ in items], now)

    def _decode(self, payload: bytes) -> Any:
        try:
            return orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise ProtocolError(400, "$", f"not valid JSON: {exc}") from None

    def _authorize(self, conn: Connection, batch: Batch) -> None:
        if batch.source != conn.source:
            raise ProtocolError(
                403, "source", f"this token writes {conn.source}, not {batch.source}"
            )
        allowed = ALLOWED_KINDS[conn.kind]
        for kind, samples in batch.samples.items():
            if samples and kind not in allowed:
                raise ProtocolError(403, kind, f"a {conn.kind} source may not write {kind} samples")
        if conn.kind != "node" and (batch.gpu_info or batch.node_info):
            raise ProtocolError(403, "gpu_info", "only a node source describes GPUs")

    def _resolve(self, conn: Connection, batch: Batch) -> Resolved:
        """Names on the wire → row ids; raises (storing nothing of this batch) on any miss."""
        out = Resolved()
        if conn.kind == "node":
            node_id = self._node_id(conn)
            for s in batch.samples.get("gpu", ()):
                out.samples.setdefault("gpu", []).append(((node_id, s["gpu"]), s))
            for s in batch.samples.get("node", ()):
                out.samples.setdefault("node", []).append(((node_id,), s))
            out.events = self._events(batch, node_id)
            out.extra, out.gpu_limits = self._info_updates(node_id, batch)
            return out
        for kind in ("rack", "feed", "loop"):
            for s in batch.samples.get(kind, ()):
                out.samples.setdefault(kind, []).append(((self._entity_id(conn, kind, s),), s))
        for s in batch.samples.get("facility", ()):
            out.samples.setdefault("facility", []).append(((conn.site_id,), s))
        out.events = self._events(batch, None)
        return out

    def _events(self, batch: Batch, node_id: int | None) -> list[Row]:
        return [
            (
                batch.source,
                batch.seq,
                pos,
                float(ev["ts"]),
                node_id,
                ev.get("gpu"),
                ev["kind"],
                ev.get("code"),
                str(ev.get("detail", ""))[:2000],
            )
            for pos, ev in enumerate(batch.events)
        ]

    def _node_id(self, conn: Connection) -> int:
        ref = self.inventory.nodes.get(conn.name)
        if ref is None and self.inventory.maybe_reload(self.store):
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
        if found is None and self.inventory.maybe_reload(self.store):
            found = table.get(key)
        if found is None:
            raise ProtocolError(400, what.split()[0], f"{what} is not in this site's inventory")
        return found

    def _info_updates(
        self, node_id: int, batch: Batch
    ) -> tuple[list[tuple[str, Row]], dict[tuple[int, int], GpuLimits]]:
        updates: list[tuple[str, Row]] = []
        limits_seen: dict[tuple[int, int], GpuLimits] = {}
        json_param = "CAST(%s AS jsonb)" if self.store.vendor == "postgresql" else "%s"
        if batch.node_info is not None:
            updates.append(
                (
                    f"UPDATE fleet_node SET info = {json_param} WHERE id = %s",
                    (orjson.dumps(batch.node_info).decode(), node_id),
                )
            )
        for info in batch.gpu_info:
            index = info.get("gpu")
            if type(index) is not int:
                continue
            raw_limits = info.get("limits")
            limits: dict[str, Any] = raw_limits if isinstance(raw_limits, dict) else {}
            values = (
                str(info.get("uuid", ""))[:64],
                str(info.get("model", ""))[:100],
                _num(limits.get("slowdown_c")),
                _num(limits.get("shutdown_c")),
                _num(limits.get("gpu_max_c")),
                _num(limits.get("mem_max_c")),
                _num(limits.get("tlimit_slowdown_c")),
                _num(limits.get("power_limit_max_w")),
                orjson.dumps(info).decode(),
            )
            # An upsert: another writer or the admin may have created the row already.
            update = (
                "uuid = excluded.uuid, model = excluded.model, slowdown_c = excluded.slowdown_c,"
                " shutdown_c = excluded.shutdown_c, gpu_max_c = excluded.gpu_max_c,"
                " mem_max_c = excluded.mem_max_c, tlimit_slowdown_c = excluded.tlimit_slowdown_c,"
                " power_limit_max_w = excluded.power_limit_max_w, info = excluded.info"
            )
            sql = (
                "INSERT INTO fleet_gpu (uuid, model, slowdown_c, shutdown_c, gpu_max_c,"
                ' mem_max_c, tlimit_slowdown_c, power_limit_max_w, info, node_id, "index")'
                f" VALUES (%s, %s, %s, %s, %s, %s, %s, %s, {json_param}, %s, %s)"
                f' ON CONFLICT (node_id, "index") DO UPDATE SET {update}'
            )
            updates.append((sql, (*values, node_id, index)))
            limits_seen[(node_id, index)] = GpuLimits(values[2], values[6])
        return updates, limits_seen

    # -- latest state ------------------------------------------------------
    def _remember(self, staged: Staged, accepted: list[tuple[int, Batch]], now: float) -> None:
        for kind, items in staged.samples.items():
            latest = self.latest.setdefault(kind, {})
            dirty = self.dirty.setdefault(kind, set())
            unsaved = self.unsaved.setdefault(kind, set())
            for key, sample in items:
                ts = sample["ts"]
                if ts > now:
                    # A node whose clock runs ahead (up to the 300 s the protocol allows)
                    # must not freeze its latest state: it counts as "now" here. The raw
                    # row keeps the time the agent sent (already built for the commit).
                    ts = sample["ts"] = now
                prev = latest.get(key)
                if prev is None:
                    latest[key] = sample
                elif ts >= prev["ts"]:
                    # Slow-cadence fields are absent from most samples: keep their last value.
                    prev.update(sample)
                else:
                    continue
                dirty.add(key)
                unsaved.add(key)
        for _, batch in accepted:
            self.sources[batch.source] = SourceState(batch.seq, now, batch.agent)

    def _load_latest(self) -> None:
        for kind in METRICS:
            cols = latest_columns(kind)
            nkey = len(ENTITY_COLUMNS[kind])
            table: dict[tuple[int, ...], dict[str, Any]] = {}
            for rec in self.store.execute(f"SELECT {', '.join(cols)} FROM {latest_table(kind)}"):
                sample = {
                    c: v for c, v in zip(cols[nkey:], rec[nkey:], strict=True) if v is not None
                }
                table[tuple(rec[:nkey])] = sample
            self.latest[kind] = table

    def flush(self, now: float) -> dict[str, Any] | None:
        """Return the live update (every call); every `save_interval_s`, also write the
        latest-state tables and source stats. Browsers get the push at the live interval;
        pages and rules that read the tables see them at most a couple of seconds old,
        and the database is spared an upsert per entity twice a second."""
        if now - self.saved_at >= self.save_interval_s:
            self.save(now)
        update = self._live_update(now)
        for keys in self.dirty.values():
            keys.clear()
        return update or None

    def save(self, now: float) -> None:
        for kind, keys in self.unsaved.items():
            if not keys:
                continue
            order = _METRIC_NAMES[kind]
            latest = self.latest[kind]
            rows = [(*key, latest[key]["ts"], *map(latest[key].get, order)) for key in keys]
            self.store.upsert_latest(kind, rows)
            keys.clear()
        self._flush_sources()
        self.saved_at = now

    def _flush_sources(self) -> None:
        if not self.sources:
            return
        json_param = "CAST(%s AS jsonb)" if self.store.vendor == "postgresql" else "%s"
        self.store.execute_many(
            f"UPDATE fleet_sourcetoken SET last_seq = %s, last_seen = %s,"
            f" agent_stats = {json_param} WHERE source = %s AND revoked = %s",
            [
                (state.seq, state.seen, orjson.dumps(state.stats or {}).decode(), source, False)
                for source, state in self.sources.items()
            ],
        )
        self.sources.clear()

    def _live_update(self, now: float) -> dict[str, Any]:
        nodes: dict[str, dict[str, Any]] = {}
        touched = {key[0] for key in self.dirty.get("gpu", ())}
        touched |= {key[0] for key in self.dirty.get("node", ())}
        if touched:
            per_node: dict[int, list[tuple[tuple[int, ...], dict[str, Any]]]] = {}
            for key, sample in self.latest.get("gpu", {}).items():
                if key[0] in touched:
                    per_node.setdefault(key[0], []).append((key, sample))
            node_latest = self.latest.get("node", {})
            for node_id in touched:
                nodes[str(node_id)] = summarize_node(
                    per_node.get(node_id, []), node_latest.get((node_id,)), self.inventory.gpus
                )
        racks = {
            str(key[0]): {"p": d.get("power_w"), "ts": d["ts"]}
            for key in self.dirty.get("rack", ())
            if (d := self.latest["rack"][key]).get("power_w") is not None
        }
        loops = {
            str(key[0]): {
                "supply_c": d.get("supply_c"),
                "return_c": d.get("return_c"),
                "flow_lpm": d.get("flow_lpm"),
                "ts": d["ts"],
            }
            for key in self.dirty.get("loop", ())
            if (d := self.latest["loop"][key])
        }
        sites = {
            str(key[0]): {"pue": d.get("pue"), "ts": d["ts"]}
            for key in self.dirty.get("facility", ())
            if (d := self.latest["facility"][key])
        }
        if not (nodes or racks or loops or sites):
            return {}
        return {"ts": now, "nodes": nodes, "racks": racks, "loops": loops, "sites": sites}


@dataclass
class Resolved:
    """One batch, resolved: (entity ids, sample) per kind, its events and info updates."""

    samples: dict[str, list[tuple[tuple[int, ...], dict[str, Any]]]] = field(default_factory=dict)
    events: list[Row] = field(default_factory=list)
    extra: list[tuple[str, Row]] = field(default_factory=list)
    gpu_limits: dict[tuple[int, int], GpuLimits] = field(default_factory=dict)


@dataclass
class Staged:
    """Everything one commit will store."""

    samples: dict[str, list[tuple[tuple[int, ...], dict[str, Any]]]] = field(default_factory=dict)
    events: list[Row] = field(default_factory=list)
    extra: list[tuple[str, Row]] = field(default_factory=list)

    def add(self, resolved: Resolved) -> None:
        for kind, items in resolved.samples.items():
            self.samples.setdefault(kind, []).extend(items)
        self.events.extend(resolved.events)
        self.extra.extend(resolved.extra)

    def rollup_marks(self) -> list[tuple[str, Row]]:
        marks: list[tuple[str, Row]] = []
        for kind, items in self.samples.items():
            oldest = min(s["ts"] for _, s in items)
            bucket = int(oldest // 60) * 60
            marks.append(
                (
                    # Always touches the row (taking its lock), so a rollup claiming it
                    # concurrently waits for this commit instead of passing these rows by.
                    "UPDATE fw_rollup_state SET dirty_from = CASE WHEN done_until > %s"
                    " AND (dirty_from IS NULL OR dirty_from > %s) THEN %s ELSE dirty_from END"
                    " WHERE tier = '1m' AND kind = %s",
                    (bucket, bucket, bucket, kind),
                )
            )
        return marks

    def rows(self) -> dict[str, tuple[tuple[str, ...], list[Row]]]:
        """Per kind: the columns this commit carries, and its rows.

        Only metrics present in at least one sample become columns (the rest
        default to NULL): fewer bound parameters, the biggest single cost of
        the SQLite insert."""
        out: dict[str, tuple[tuple[str, ...], list[Row]]] = {}
        for kind, items in self.samples.items():
            present: set[str] = set()
            for _, sample in items:
                present.update(sample)
            metrics = tuple(m for m in _METRIC_NAMES[kind] if m in present)
            # Samples of one shape carry every column: itemgetter reads them in C. A
            # commit mixing shapes (a slow field in some samples) takes the .get path.
            # (with no metric, itemgetter("ts") would return a scalar, not a tuple)
            getter = operator.itemgetter("ts", *metrics) if metrics else None
            if getter is None:
                rows = [(*key, s["ts"]) for key, s in items]
            else:
                try:
                    rows = [(*key, *getter(s)) for key, s in items]
                except KeyError:
                    rows = [(*key, s["ts"], *map(s.get, metrics)) for key, s in items]
            columns = (*ENTITY_COLUMNS[kind], "ts", *metrics)
            out[kind] = (columns, rows)
        return out


def _seq_of(obj: Any) -> int | None:
    """The batch's seq when it can be read, so the agent knows which batch was refused."""
    seq = obj.get("seq") if type(obj) is dict else None
    return seq if type(seq) is int else None


def _num(value: Any) -> float | None:
    return float(value) if type(value) in (int, float) else None


def gpu_headroom_c(sample: dict[str, Any], limits: GpuLimits | None) -> float | None:
    """°C below the GPU's own slowdown limit (absolute form, else the T.Limit form)."""
    if limits is None:
        return None
    temp = sample.get("temp_gpu_c")
    if limits.slowdown_c is not None and temp is not None:
        return float(limits.slowdown_c - temp)
    margin = sample.get("temp_margin_c")
    if limits.tlimit_slowdown_c is not None and margin is not None:
        return float(margin - limits.tlimit_slowdown_c)
    return None


def summarize_node(
    gpus: list[tuple[tuple[int, ...], dict[str, Any]]],
    node: dict[str, Any] | None,
    limits: dict[tuple[int, int], GpuLimits],
) -> dict[str, Any]:
    """The figures a fleet page shows per node: GPU power, hottest GPU, least headroom."""
    power = [p for _, s in gpus if (p := s.get("power_w")) is not None]
    temps = [t for _, s in gpus if (t := s.get("temp_gpu_c")) is not None]
    heads = [
        h for key, s in gpus if (h := gpu_headroom_c(s, limits.get((key[0], key[1])))) is not None
    ]
    reasons = 0
    for _, s in gpus:
        reasons |= s.get("clock_event_reasons") or 0
    ts = max((s["ts"] for _, s in gpus), default=None)
    out: dict[str, Any] = {
        "gpu_power_w": round(sum(power), 1) if power else None,
        "max_temp_c": max(temps) if temps else None,
        "min_headroom_c": min(heads) if heads else None,
        "reasons": reasons,
        "ts": ts,
    }
    if node is not None:
        out["power_w"] = node.get("power_w")
        out["ts"] = max(out["ts"] or 0, node["ts"])
    return out


def now_s() -> float:
    return time.time()
