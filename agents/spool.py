"""The disk spool: every batch is on disk before it is sent, and leaves only on the server's ack.

One file per batch (`<seq>.json`), written to a temporary name, fsync'd, then renamed into
place, so a crash leaves either the whole batch or nothing. Together with the server's
idempotency this makes delivery exactly-once in storage: a batch whose ack was lost is
simply sent again.

The spool has a size bound. Past it the *oldest* batches go first (the newest data is the
most useful on a dashboard) and the loss is counted in `dropped_batches`, which is persisted
and reported in every later batch's `agent` block, so the server learns of it when the link
returns.

Sequence numbers must stay monotonic across restarts (the server keys events by
(source, seq, position)). Writing the counter on every batch would cost an fsync per batch,
so numbers are reserved in blocks, like a database sequence cache: a restart skips the rest
of the block, which leaves a gap but never reuses a number.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from agents.log import get_logger

log = get_logger("agents.spool")

SEQ_BLOCK = 1000
_STATE = "state.json"
_SUFFIX = ".json"


@dataclass(frozen=True, slots=True)
class SpoolSettings:
    max_bytes: int = 256 << 20
    max_batches: int = 100_000
    # Off only in the simulator, whose hundreds of virtual disks are not worth an fsync each.
    fsync: bool = True


class Spool:
    def __init__(self, directory: Path, settings: SpoolSettings | None = None) -> None:
        self.directory = directory
        self.settings = settings or SpoolSettings()
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        # seq -> size; kept in ascending seq order (new batches always get a higher seq).
        self._sizes: dict[int, int] = {}
        found = [p for p in directory.glob("*" + _SUFFIX) if p.stem.isdigit()]
        for path in sorted(found, key=lambda p: int(p.stem)):
            self._sizes[int(path.stem)] = path.stat().st_size
        for stale in directory.glob("*.tmp"):  # a write that a crash interrupted
            stale.unlink(missing_ok=True)
        self._bytes = sum(self._sizes.values())
        state = self._read_state()
        self.dropped_batches: int = int(state.get("dropped_batches", 0))
        self._reserved: int = int(state.get("seq_reserved", 0))
        highest = max(self._sizes, default=-1)
        self._next_seq = max(self._reserved, highest + 1)
        self._reserve_block()

    # -- writing -------------------------------------------------------------------------

    def next_seq(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        if self._next_seq >= self._reserved:
            self._reserve_block()
        return seq

    def put(self, seq: int, payload: bytes) -> int:
        """Store one batch durably; return how many old batches the bound pushed out."""
        final = self._path(seq)
        tmp = final.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(payload)
            while view:  # os.write may write less than asked
                view = view[os.write(fd, view) :]
            if self.settings.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
        self._fsync_directory()
        self._sizes[seq] = len(payload)
        self._bytes += len(payload)
        return self._enforce_bound()

    # -- reading and acknowledging -------------------------------------------------------

    def pending(self) -> list[int]:
        """Sequence numbers on disk, oldest first."""
        return list(self._sizes)

    def pending_after(self, seq: int, limit: int) -> list[int]:
        """Up to `limit` sequence numbers above `seq`, oldest first (what is still unsent)."""
        found: list[int] = []
        for candidate in self._sizes:  # insertion order is ascending seq
            if len(found) >= limit:
                break
            if candidate > seq:
                found.append(candidate)
        return found

    def read(self, seq: int) -> bytes | None:
        try:
            return self._path(seq).read_bytes()
        except FileNotFoundError:
            return None  # pushed out by the bound after it was queued

    def remove(self, seq: int) -> None:
        """Forget a batch the server acknowledged (or refused for good)."""
        size = self._sizes.pop(seq, None)
        if size is None:
            return
        self._bytes -= size
        self._path(seq).unlink(missing_ok=True)

    def __len__(self) -> int:
        return len(self._sizes)

    @property
    def size_bytes(self) -> int:
        return self._bytes

    # -- internals -----------------------------------------------------------------------

    def make_room(self, incoming_bytes: int) -> int:
        """Drop the oldest batches so one more of about this size fits; return how many.

        Called before a batch is assembled, so the batch already carries the loss it caused.
        """
        return self._enforce_bound(incoming_bytes, 1)

    def _enforce_bound(self, incoming_bytes: int = 0, incoming_batches: int = 0) -> int:
        dropped = 0
        max_bytes = self.settings.max_bytes - incoming_bytes
        max_batches = self.settings.max_batches - incoming_batches
        while len(self._sizes) > 1 - incoming_batches and (
            self._bytes > max_bytes or len(self._sizes) > max_batches
        ):
            self.remove(next(iter(self._sizes)))
            dropped += 1
        if dropped:
            self.dropped_batches += dropped
            self._write_state()
            log.warning(
                "spool full: dropped oldest batches",
                dropped=dropped,
                dropped_total=self.dropped_batches,
                spool=str(self.directory),
            )
        return dropped

    def _reserve_block(self) -> None:
        self._reserved = self._next_seq + SEQ_BLOCK
        self._write_state()

    def _read_state(self) -> dict[str, int]:
        try:
            data = json.loads((self.directory / _STATE).read_bytes())
        except (FileNotFoundError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write_state(self) -> None:
        state = {"seq_reserved": self._reserved, "dropped_batches": self.dropped_batches}
        tmp = self.directory / (_STATE + ".tmp")
        with open(tmp, "wb") as handle:
            handle.write(json.dumps(state).encode())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.directory / _STATE)
        self._fsync_directory()

    def _fsync_directory(self) -> None:
        # The rename is durable only once the directory entry is on disk.
        if not self.settings.fsync:
            return
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _path(self, seq: int) -> Path:
        return self.directory / f"{seq:012d}{_SUFFIX}"
