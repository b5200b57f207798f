"""What the ingest writer does with a group of batches: parse, validate,
authorize, resolve names, store in one commit, and keep the latest state.

Pure logic over a `Store`, no sockets: `writer_process.py` feeds it frames and
tests can drive it directly.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from agents.protocol import parse_source
from agents.protocol.metrics import METRICS
from agents.protocol.validate import Batch, ProtocolError, validate_batch
from fleet.ingest.inventory import GpuLimits, Inventory
from fleet.ingest.store import Row, Store

log = logging.getLogger("fleet.ingest.writer")

OK = 0

# Which sample kinds each source kind may write (docs/protocol.md, "Sources and tokens").
ALLOWED_KINDS: dict[str, frozenset[str]] = {
    "node": frozenset({"gpu", "node"}),
    "rack": frozenset({"rack", "feed"}),
    "loop": frozenset({"loop"}),
    "site": frozenset({"rack", "feed", "loop", "facility"}),
}

_GPU_COL = {m.name: 3 + i for i, m in enumerate(METRICS["gpu"])}
_NODE_COL = {m.name: 2 + i for i, m in enumerate(METRICS["node"])}
_RACK_COL = {m.name: 2 + i for i, m in enumerate(METRICS["rack"])}
_LOOP_COL = {m.name: 2 + i for i, m in enumerate(METRICS["loop"])}
_FAC_COL = {m.name: 2 + i for i, m in enumerate(METRICS["facility"])}
_KEY_LEN = {"gpu": 2, "node": 1, "rack": 1, "feed": 1, "loop": 1, "facility": 1}


@dataclass(slots=True)
class Connection:
    source: str
    kind: str
    name: str
    site_id: int


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
    # kind -> entity key -> merged newest row (raw column order)
    latest: dict[str, dict[tuple[int, ...], list[Any]]] = field(default_factory=dict)
    dirty: dict[str, set[tuple[int, ...]]] = field(default_factory=dict)
    oldest_written: dict[str, float] = field(default_factory=dict)
    sources: dict[str, SourceState] = field(default_factory=dict)
    stored_batches: int = 0

    def start(self) -> None:
        self.inventory.load(self.store)
        self._load_latest()

    # -- connections -------------------------------------------------------
    def hello(self, conn_id: int, source: str, site_id: int) -> None:
        kind, name = parse_source(source)
        self.conns[conn_id] = Connection(source, kind, name, site_id)

    def bye(self, conn_id: int) -> None:
        self.conns.pop(conn_id, None)

    # -- batches -----------------------------------------------------------
    def process(self, frames: list[tuple[int, bytes]], now: float) -> list[Result]:
        """Validate every frame, store the good ones in one commit, answer each."""
        results: list[Result] = []
        good: list[tuple[Connection, Batch, int]] = []
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
            except ProtocolError as exc:
                results.append(Result(conn_id, batch.seq, exc.code, exc.as_dict()))
                continue
            good.append((conn, batch, conn_id))
        if not good:
            return results
        rows, events, extra, rejected = self._resolve(good)
        results.extend(rejected)
        stored = [(c, b, cid) for c, b, cid in good if cid not in {r.conn_id for r in rejected}]
        if stored:
            self.store.write(rows, events, extra)
            self.stored_batches += len(stored)
            self._remember(rows, stored, now)
            results.extend(Result(cid, b.seq, OK) for _, b, cid in stored)
        return results

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
        for kind in batch.rows:
            if batch.rows[kind] and kind not in allowed:
                raise ProtocolError(403, kind, f"a {conn.kind} source may not write {kind} samples")
        if conn.kind != "node" and (batch.gpu_info or batch.node_info):
            raise ProtocolError(403, "gpu_info", "only a node source describes GPUs")

    def _resolve(
        self, good: list[tuple[Connection, Batch, int]]
    ) -> tuple[dict[str, list[Row]], list[Row], list[tuple[str, Row]], list[Result]]:
        rows: dict[str, list[Row]] = {}
        events: list[Row] = []
        extra: list[tuple[str, Row]] = []
        rejected: list[Result] = []
        for conn, batch, conn_id in good:
            try:
                resolved = self._resolve_one(conn, batch)
            except ProtocolError as exc:
                rejected.append(Result(conn_id, batch.seq, exc.code, exc.as_dict()))
                continue
            for kind, kind_rows in resolved.items():
                rows.setdefault(kind, []).extend(kind_rows)
            node_id = self._node_id(conn) if conn.kind == "node" else None
            for pos, ev in enumerate(batch.events):
                events.append(
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
                )
            if node_id is not None:
                extra.extend(self._info_updates(node_id, batch))
        return rows, events, extra, rejected

    def _node_id(self, conn: Connection) -> int:
        ref = self.inventory.nodes.get(conn.name)
        if ref is None and self.inventory.maybe_reload(self.store):
            ref = self.inventory.nodes.get(conn.name)
        if ref is None:
            raise ProtocolError(403, "source", f"node {conn.name} is not in the inventory")
        return ref.id

    def _resolve_one(self, conn: Connection, batch: Batch) -> dict[str, list[Row]]:
        out: dict[str, list[Row]] = {}
        if conn.kind == "node":
            node_id = self._node_id(conn)
            if "gpu" in batch.rows:
                out["gpu"] = [(r[0], node_id, *r[1:]) for r in batch.rows["gpu"]]
            if "node" in batch.rows:
                out["node"] = [(r[0], node_id, *r[1:]) for r in batch.rows["node"]]
            return out
        for kind in ("rack", "feed", "loop"):
            if kind in batch.rows:
                out[kind] = [self._entity_row(conn, kind, r) for r in batch.rows[kind]]
        if "facility" in batch.rows:
            out["facility"] = [(r[0], conn.site_id, *r[1:]) for r in batch.rows["facility"]]
        return out

    def _entity_row(self, conn: Connection, kind: str, r: Row) -> Row:
        if kind == "loop":
            return (r[0], self._lookup_loop(conn, r[1]), *r[2:])
        rack_id = self._lookup_rack(conn, r[1])
        if kind == "rack":
            return (r[0], rack_id, *r[2:])
        feed_id = self._lookup(self.inventory.feeds, (rack_id, r[2]), f"feed {r[1]}/{r[2]}")
        return (r[0], feed_id, *r[3:])

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

    def _info_updates(self, node_id: int, batch: Batch) -> list[tuple[str, Row]]:
        updates: list[tuple[str, Row]] = []
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
            limits = info.get("limits") if isinstance(info.get("limits"), dict) else {}
            assert isinstance(limits, dict)
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
            if (node_id, index) in self.inventory.gpus:
                sql = (
                    "UPDATE fleet_gpu SET uuid = %s, model = %s, slowdown_c = %s, shutdown_c = %s,"
                    " gpu_max_c = %s, mem_max_c = %s, tlimit_slowdown_c = %s,"
                    f" power_limit_max_w = %s, info = {json_param}"
                    ' WHERE node_id = %s AND "index" = %s'
                )
                updates.append((sql, (*values, node_id, index)))
            else:
                sql = (
                    "INSERT INTO fleet_gpu (uuid, model, slowdown_c, shutdown_c, gpu_max_c,"
                    ' mem_max_c, tlimit_slowdown_c, power_limit_max_w, info, node_id, "index")'
                    f" VALUES (%s, %s, %s, %s, %s, %s, %s, %s, {json_param}, %s, %s)"
                )
                updates.append((sql, (*values, node_id, index)))
            self.inventory.gpus[(node_id, index)] = GpuLimits(values[2], values[6])
        return updates

    # -- latest state ------------------------------------------------------
    def _remember(
        self, rows: dict[str, list[Row]], stored: list[tuple[Connection, Batch, int]], now: float
    ) -> None:
        for kind, kind_rows in rows.items():
            nkey = _KEY_LEN[kind]
            latest = self.latest.setdefault(kind, {})
            dirty = self.dirty.setdefault(kind, set())
            oldest = self.oldest_written.get(kind)
            for row in kind_rows:
                key = row[1 : 1 + nkey]
                prev = latest.get(key)
                if prev is None:
                    latest[key] = list(row)
                elif row[0] >= prev[0]:
                    # Slow-cadence fields are absent from most samples: keep their last value.
                    latest[key] = [
                        n if n is not None else o for n, o in zip(row, prev, strict=True)
                    ]
                else:
                    continue
                dirty.add(key)
                if oldest is None or row[0] < oldest:
                    oldest = row[0]
            if oldest is not None:
                self.oldest_written[kind] = oldest
        for _, batch, _ in stored:
            self.sources[batch.source] = SourceState(batch.seq, now, batch.agent)

    def _load_latest(self) -> None:
        from fleet.ingest.store import latest_columns
        from fleet.storage.schema import latest_table

        for kind in METRICS:
            nkey = _KEY_LEN[kind]
            cols = latest_columns(kind)
            table: dict[tuple[int, ...], list[Any]] = {}
            for rec in self.store.execute(f"SELECT {', '.join(cols)} FROM {latest_table(kind)}"):
                keys, ts, values = rec[:nkey], rec[nkey], rec[nkey + 1 :]
                table[tuple(keys)] = [ts, *keys, *values]
            self.latest[kind] = table

    def flush(self, now: float) -> dict[str, Any] | None:
        """Write dirty latest rows, source stats and rollup marks; return the live update."""
        update: dict[str, Any] = {}
        for kind, keys in self.dirty.items():
            if not keys:
                continue
            nkey = _KEY_LEN[kind]
            latest = self.latest[kind]
            rows = []
            for key in keys:
                row = latest[key]
                rows.append((*row[1 : 1 + nkey], row[0], *row[1 + nkey :]))
            self.store.upsert_latest(kind, rows)
        self._mark_rollups_dirty()
        self._flush_sources()
        update = self._live_update(now)
        for keys in self.dirty.values():
            keys.clear()
        return update or None

    def _mark_rollups_dirty(self) -> None:
        for kind, oldest in self.oldest_written.items():
            bucket = int(oldest // 60) * 60
            # Only data older than what the 1-minute rollup already covered is "late".
            self.store.execute(
                "UPDATE fw_rollup_state SET dirty_from = %s WHERE tier = '1m' AND kind = %s"
                " AND done_until > %s AND (dirty_from IS NULL OR dirty_from > %s)",
                (bucket, kind, bucket, bucket),
            )
        self.oldest_written.clear()

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
            per_node: dict[int, list[list[Any]]] = {}
            for key, row in self.latest.get("gpu", {}).items():
                if key[0] in touched:
                    per_node.setdefault(key[0], []).append(row)
            node_rows = self.latest.get("node", {})
            for node_id in touched:
                summary = summarize_node(
                    per_node.get(node_id, []), node_rows.get((node_id,)), self.inventory.gpus
                )
                nodes[str(node_id)] = summary
        racks = {
            str(key[0]): {"p": row[_RACK_COL["power_w"]], "ts": row[0]}
            for key in self.dirty.get("rack", ())
            if (row := self.latest["rack"][key])
        }
        loops = {
            str(key[0]): {
                "supply_c": row[_LOOP_COL["supply_c"]],
                "return_c": row[_LOOP_COL["return_c"]],
                "flow_lpm": row[_LOOP_COL["flow_lpm"]],
                "ts": row[0],
            }
            for key in self.dirty.get("loop", ())
            if (row := self.latest["loop"][key])
        }
        sites = {
            str(key[0]): {"pue": row[_FAC_COL["pue"]], "ts": row[0]}
            for key in self.dirty.get("facility", ())
            if (row := self.latest["facility"][key])
        }
        if not (nodes or racks or loops or sites):
            return {}
        return {"ts": now, "nodes": nodes, "racks": racks, "loops": loops, "sites": sites}


def _seq_of(obj: Any) -> int | None:
    """The batch's seq when it can be read, so the agent knows which batch was refused."""
    seq = obj.get("seq") if type(obj) is dict else None
    return seq if type(seq) is int else None


def _num(value: Any) -> float | None:
    return float(value) if type(value) in (int, float) else None


def gpu_headroom_c(row: list[Any] | tuple[Any, ...], limits: GpuLimits | None) -> float | None:
    """°C below the GPU's own slowdown limit (absolute form, else the T.Limit form)."""
    if limits is None:
        return None
    temp = row[_GPU_COL["temp_gpu_c"]]
    if limits.slowdown_c is not None and temp is not None:
        return float(limits.slowdown_c - temp)
    margin = row[_GPU_COL["temp_margin_c"]]
    if limits.tlimit_slowdown_c is not None and margin is not None:
        return float(margin - limits.tlimit_slowdown_c)
    return None


def summarize_node(
    gpu_rows: list[list[Any]],
    node_row: list[Any] | None,
    limits: dict[tuple[int, int], GpuLimits],
) -> dict[str, Any]:
    """The figures a fleet page shows per node: GPU power, hottest GPU, least headroom."""
    power = [r[_GPU_COL["power_w"]] for r in gpu_rows if r[_GPU_COL["power_w"]] is not None]
    temps = [r[_GPU_COL["temp_gpu_c"]] for r in gpu_rows if r[_GPU_COL["temp_gpu_c"]] is not None]
    heads = [h for r in gpu_rows if (h := gpu_headroom_c(r, limits.get((r[1], r[2])))) is not None]
    reasons = 0
    for r in gpu_rows:
        reasons |= r[_GPU_COL["clock_event_reasons"]] or 0
    ts = max((r[0] for r in gpu_rows), default=None)
    out: dict[str, Any] = {
        "gpu_power_w": round(sum(power), 1) if power else None,
        "max_temp_c": max(temps) if temps else None,
        "min_headroom_c": min(heads) if heads else None,
        "reasons": reasons,
        "ts": ts,
    }
    if node_row is not None:
        out["power_w"] = node_row[_NODE_COL["power_w"]]
        out["ts"] = max(out["ts"] or 0, node_row[0])
    return out


def now_s() -> float:
    return time.time()
