"""What the ingest child does with one round of batches: decode, validate, authorize,
resolve names, store them in one commit through the one write path, and answer each.

Pure logic over a `Database`, no sockets: `child.py` feeds it frames and tests
drive it directly.

Blast radius: whatever goes wrong while handling one batch is that batch's answer
and nobody else's. Each batch is prepared on its own (a fault there is its 400,
403 or — for a database that is away — 503). The round is then committed once; if
that fails, the cause decides (`fleet.storage.dialect.failure_kind`): a transient
failure (lost connection, lock time-out) answers the round 503 and the agents
resend; a refusal (constraint, out-of-range value) is bisected by committing each
batch alone, so only the batch the database refuses is answered 400.

Latest state: the pipeline holds only what changed since its last save (a
`LatestDelta`), never a copy of the fleet. The delta is merged into the
database, per field newest-wins, inside the next commit once `save_interval_s`
has passed (or by `flush` when no batch comes).
"""

from __future__ import annotations

import logging
import operator
from dataclasses import dataclass, field
from typing import Any

import orjson

from agents.protocol import parse_source
from agents.protocol.validate import Batch, ProtocolError, validate_batch
from fleet.ingest.fast_decode import fast_batch
from fleet.ingest.inventory import Inventory
from fleet.ingest.resolve import Connection, Resolver, authorize, to_json
from fleet.ingest.tally import too_old_statement
from fleet.storage.db import Database, Row
from fleet.storage.dialect import failure_kind, is_database_error, json_param
from fleet.storage.latest import Key, LatestDelta
from fleet.storage.samples import (
    SampleWrite,
    count_too_old,
    write_samples,
)
from fleet.storage.samples import raw_keep_s as configured_raw_keep_s

log = logging.getLogger("fleet.ingest.pipeline")

OK = 0
RETRY = 503

# A batch's declared (sample_s, batch_s, fields_s as JSON); None, None, "{}" when absent.
Cadence = tuple[float | None, float | None, str]
SourceSeen = tuple[int, float, str, float | None, float | None, str]  # seq, seen, stats, cadence


@dataclass(slots=True)
class Result:
    conn_id: int
    seq: int | None
    code: int  # 0 = stored; else the HTTP-like status (400, 401, 403, 503)
    # The refusal: of the batch, or (code 0) of the part of it that was not stored.
    error: dict[str, Any] | None = None


@dataclass(slots=True)
class Prepared:
    """One batch, ready to commit."""

    conn_id: int
    seq: int
    source: str
    write: SampleWrite
    stats: str  # the agent block as JSON, serialised up front
    cadence: Cadence  # as the batch declared it: (sample_s, batch_s), None when absent
    left_out: dict[str, Any] | None  # the refusal of a part not stored (unknown GPUs)


@dataclass
class Counters:
    batches: int = 0  # stored (and so acknowledged)
    samples: int = 0  # in the stored batches
    refused: int = 0
    retried: int = 0
    saves: int = 0
    save_failures: int = 0
    too_old: int = 0  # samples older than raw retention: acked, not stored (history)


@dataclass
class IngestPipeline:
    db: Database
    save_interval_s: float = 0.5
    inventory: Inventory = field(default_factory=Inventory)
    conns: dict[int, Connection] = field(default_factory=dict)
    pending: LatestDelta = field(default_factory=LatestDelta)  # committed, not yet merged
    sources: dict[str, SourceSeen] = field(default_factory=dict)
    changed: dict[str, set[Key]] = field(default_factory=dict)  # saved, not yet reported
    saved_at: float = 0.0
    counters: Counters = field(default_factory=Counters)
    # Raw retention: older samples are acked but not stored. The child is given it by its
    # server (fleet/ingest/link.py child_config); in-process users read Django's settings.
    raw_keep_s: float = field(default_factory=configured_raw_keep_s)

    def __post_init__(self) -> None:
        self.resolver = Resolver(self.db, self.inventory)

    # -- connections -------------------------------------------------------
    def hello(self, conn_id: int, source: str, site_id: int, token_hash: str = "") -> None:
        kind, name = parse_source(source)
        self.conns[conn_id] = Connection(source, kind, name, site_id, token_hash)

    def bye(self, conn_id: int) -> None:
        self.conns.pop(conn_id, None)

    def revoked_connections(self) -> list[Result]:
        """Connections whose token has been revoked since they connected (re-enrolled,
        or revoked by an admin): answered 401, so the server closes them with 4401."""
        if not self.conns:
            return []
        valid = {
            row[0]
            for row in self.db.query(
                "SELECT token_hash FROM fleet_sourcetoken WHERE revoked = %s", (False,)
            )
        }
        gone = [cid for cid, conn in self.conns.items() if conn.token_hash not in valid]
        error = {"code": 401, "field": "authorization", "reason": "the token was revoked"}
        for cid in gone:
            self.conns.pop(cid, None)
        return [Result(cid, None, 401, error) for cid in gone]

    # -- a round -----------------------------------------------------------
    def process(self, frames: list[tuple[int, bytes]], now: float) -> list[Result]:
        """Answer every frame: prepare each alone, commit the good ones together."""
        results: list[Result] = []
        ready: list[Prepared] = []
        self.resolver.begin_round()
        for conn_id, payload in frames:
            conn = self.conns.get(conn_id)
            if conn is None:
                continue  # the connection went away; its agent will resend
            prepared = self._prepare(conn_id, conn, payload, now, results)
            if prepared is not None:
                ready.append(prepared)
        if ready:
            results.extend(self._commit_round(ready, now))
        return results

    def _prepare(
        self, conn_id: int, conn: Connection, payload: bytes, now: float, results: list[Result]
    ) -> Prepared | None:
        obj: Any = None
        batch: Batch | None = None
        try:
            batch = fast_batch(payload, now)  # None: the full path decides, and words why
            if batch is None:
                obj = _decode(payload)
                batch = validate_batch(obj, now)
            authorize(conn, batch)
            if not self.inventory.loaded_at:
                self.inventory.load(self.db)
            write, left_out = self.resolver.resolve(conn, batch)
            stats = to_json(batch.agent or {}, "agent")
            cadence = (batch.sample_s, batch.batch_s, to_json(batch.fields_s, "cadence"))
            refusal = left_out.as_dict() if left_out else None
            return Prepared(conn_id, batch.seq, batch.source, write, stats, cadence, refusal)
        except ProtocolError as exc:
            seq = batch.seq if batch is not None else _seq_of(obj)
            results.append(Result(conn_id, seq, exc.code, exc.as_dict()))
        except Exception as exc:  # any fault here is this batch's alone
            seq = batch.seq if batch is not None else _seq_of(obj)
            results.append(self._failure(conn_id, seq, exc))
        return None

    def _failure(self, conn_id: int, seq: int | None, exc: Exception) -> Result:
        """An unexpected fault while handling one batch: the input's (400) unless the
        database is the cause and says it is transient (503)."""
        if is_database_error(exc) and failure_kind(exc) == "retry":
            log.warning("batch from connection %s: database unavailable: %s", conn_id, exc)
            self.counters.retried += 1
            return _retry(conn_id, seq, exc)
        log.warning("batch from connection %s refused: %r", conn_id, exc)
        self.counters.refused += 1
        reason = f"this batch could not be processed ({exc.__class__.__name__}: {exc})"[:300]
        return Result(conn_id, seq, 400, {"code": 400, "field": "$", "reason": reason})

    def _commit_round(self, ready: list[Prepared], now: float) -> list[Result]:
        try:
            self._commit(ready, now)
            return [Result(p.conn_id, p.seq, OK, p.left_out) for p in ready]
        except Exception as exc:  # classified below, by cause
            if failure_kind(exc) == "retry":
                log.warning("commit of %d batches failed, answered 503: %s", len(ready), exc)
                self.counters.retried += len(ready)
                return [_retry(p.conn_id, p.seq, exc) for p in ready]
            if len(ready) == 1:
                return [self._refused(ready[0], exc)]
            log.warning("commit of %d batches refused (%s); retrying one by one", len(ready), exc)
        results: list[Result] = []
        for i, item in enumerate(ready):
            try:
                self._commit([item], now)
                results.append(Result(item.conn_id, item.seq, OK, item.left_out))
            except Exception as exc:  # classified by cause
                if failure_kind(exc) == "retry":
                    # The database went away meanwhile: this batch and the rest are resent.
                    self.counters.retried += len(ready) - i
                    return results + [_retry(p.conn_id, p.seq, exc) for p in ready[i:]]
                results.append(self._refused(item, exc))
        return results

    def _refused(self, item: Prepared, exc: Exception) -> Result:
        log.warning("batch %s of %s refused by the database: %s", item.seq, item.source, exc)
        self.counters.refused += 1
        reason = f"the database refused this batch ({exc.__class__.__name__}: {exc})"[:300]
        return Result(item.conn_id, item.seq, 400, {"code": 400, "field": "$", "reason": reason})

    def _commit(self, items: list[Prepared], now: float) -> None:
        write = SampleWrite()
        horizon = now - self.raw_keep_s
        # In source order (stable: one source's batches keep theirs): each batch's inventory
        # statements (node info, GPU rows and limits, refusal counts) then lock their rows in
        # the order another child's commit does, whatever order the batches arrived in.
        for item in sorted(items, key=_BY_SOURCE):
            write.extend(item.write)
            if too_old := count_too_old(item.write, horizon):
                # acked, not stored: counted per source for the admin, in this commit
                write.statements.append(
                    too_old_statement(item.source, too_old, self.raw_keep_s, now, self.db.vendor)
                )
        save = self._save_due(now)
        latest = self.pending if save else None
        if save:
            write.statements.extend(self._source_statements())
        too_old = sum(write_samples(self.db, write, latest, horizon=horizon).values())
        # Only what is committed changes what the pipeline remembers.
        self.counters.too_old += too_old
        self.counters.batches += len(items)
        self.counters.samples += sum(len(kind_items) for kind_items in write.samples.values())
        if save:
            self._saved(now)
        for kind, kind_items in write.samples.items():
            for key, sample in kind_items:
                self.pending.add(kind, key, sample, now)
        for item in items:
            self.sources[item.source] = (item.seq, now, item.stats, *item.cadence)

    # -- latest state --------------------------------------------------------
    def _save_due(self, now: float) -> bool:
        return now - self.saved_at >= self.save_interval_s and bool(self.pending or self.sources)

    def flush(self, now: float) -> None:
        """Merge the pending latest state when it is due and no batch did it."""
        if not self._save_due(now):
            return
        # Through the one write path, so a save locks rows in the order a commit does
        # (sources, then latest state): two children saving the same nodes cannot deadlock.
        write = SampleWrite(statements=self._source_statements())
        try:
            write_samples(self.db, write, self.pending)
        except Exception as exc:  # kept pending: the next save retries
            self.counters.save_failures += 1
            log.warning("latest-state save failed (kept for the next one): %s", exc)
            return
        self._saved(now)

    def _saved(self, now: float) -> None:
        for kind, keys in self.pending.changed().items():
            self.changed.setdefault(kind, set()).update(keys)
        self.pending = LatestDelta()
        self.sources.clear()
        self.saved_at = now
        self.counters.saves += 1

    def take_changed(self) -> dict[str, list[list[int]]]:
        """Entities whose latest state was saved since the last call (for live pages)."""
        out = {kind: [list(k) for k in keys] for kind, keys in self.changed.items() if keys}
        self.changed = {}
        return out

    def _source_statements(self) -> list[tuple[str, Row]]:
        if not self.sources:
            return []
        # The declared cadence rides in the same statement (one pipelined executemany per
        # save, whatever the number of sources); NULL from an agent older than the field.
        json = json_param(self.db.vendor)
        sql = (
            f"UPDATE fleet_sourcetoken SET last_seq = %s, last_seen = %s, agent_stats = {json},"
            f" sample_interval_s = %s, batch_interval_s = %s, field_intervals_s = {json}"
            " WHERE source = %s AND revoked = %s"
        )
        # In source order: two writers updating the same sources (a node that reconnected to
        # the other server process) then lock the rows in the same order and cannot deadlock.
        return [
            (sql, (seq, seen, stats, sample_s, batch_s, fields, source, False))
            for source, (seq, seen, stats, sample_s, batch_s, fields) in sorted(
                self.sources.items()
            )
        ]


_BY_SOURCE = operator.attrgetter("source")


def _decode(payload: bytes) -> Any:
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(400, "$", f"not valid JSON: {exc}") from None


def _retry(conn_id: int, seq: int | None, exc: BaseException) -> Result:
    reason = f"storage is unavailable, resend later ({exc.__class__.__name__})"
    return Result(conn_id, seq, RETRY, {"code": RETRY, "field": "$", "reason": reason})


def _seq_of(obj: Any) -> int | None:
    """The batch's seq when it can be read, so the agent knows which batch was refused."""
    seq = obj.get("seq") if type(obj) is dict else None
    return seq if type(seq) is int and 0 <= seq <= 2**63 - 1 else None
