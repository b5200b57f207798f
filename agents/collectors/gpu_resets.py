"""GPU resets and driver reloads as the agent sees them, sent as events of their own.

NVML's energy counter counts from the moment the driver set the GPU up, so it starts again
at a GPU reset and at a driver load. The GPU collector reads it on its slow lane
(`energy_every`); each read is compared here with the one before:

- **while the agent runs**, a counter lower than at the last read is a `gpu_reset`, or a
  `driver_reload` when the driver's version changed with it;
- **across the agent's own restart** (a GPU reset or a driver reload needs NVML's clients,
  the agent among them, stopped), the last read of each GPU is kept in a small state file
  (by UUID, beside the spool) and compared at start: the node rebooted (another boot id) or
  the driver's version changed → `driver_reload` on every GPU; every GPU's counter lower
  than before, on a node of two GPUs or more → `driver_reload` (all of them at once is a
  reload, or a reset of every GPU, which the record counts alike); otherwise each GPU whose
  counter is lower → `gpu_reset`.

Each event is stamped with the moment the agent saw it, and its detail says since when it
may have happened (the read before). A counter that did not restart (a reset the energy
counter survives) is not seen, as on the server side.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.log import get_logger
from agents.protocol.memory import DRIVER_RELOAD, GPU_RESET

log = get_logger("agents.collectors.gpu_resets")

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
SAVE_EVERY_S = 10.0  # the state file is rewritten at most this often (and at close)


@dataclass(frozen=True, slots=True)
class Seen:
    """A GPU's energy counter at one read."""

    energy_mj: int
    ts: float


def boot_id(path: Path = BOOT_ID) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


class ResetWatch:
    def __init__(self, state_path: Path | None, boot: str | None, driver: str | None) -> None:
        self.state_path = state_path
        self.boot = boot
        self.driver = driver
        self._seen: dict[str, Seen] = {}  # by UUID: a GPU keeps its UUID across a reset
        self._lock = threading.Lock()
        self._saved_at = float("-inf")
        self._reload_pending: set[str] = set()  # GPUs whose next restart is the reload's
        # Across the agent's restart: each GPU's read before it, until its first read now
        self._before: dict[str, Seen] = {}
        self._first: dict[str, tuple[int, int]] = {}  # UUID -> (index, energy) read since
        self._gpus = 0

    def start(self, gpus: dict[int, str], now: float) -> list[dict[str, Any]]:
        """What the agent's own restart hid, for the GPUs found now (index -> UUID): a new
        boot or driver is known at once; a restarted energy counter once each GPU's first
        read (on the slow lane, as every energy read) has been compared with the last read
        before the restart, kept in the state file."""
        saved = self._load()
        if saved is None:
            return []
        known = {i: saved["gpus"][uuid] for i, uuid in gpus.items() if uuid in saved["gpus"]}
        rebooted = self.boot is not None and saved["boot"] not in (None, self.boot)
        old_driver = saved["driver"]
        new_driver = self.driver is not None and old_driver not in (None, self.driver)
        if rebooted or new_driver:
            why = "the node restarted" if rebooted else f"driver {old_driver} → {self.driver}"
            return [_event(i, DRIVER_RELOAD, now, s.ts, why) for i, s in known.items()]
        with self._lock:
            self._before = {gpus[i]: s for i, s in known.items()}
            self._gpus = len(gpus)
        return []

    def energy(
        self, index: int, uuid: str, energy_mj: int, now: float, driver: Callable[[], str | None]
    ) -> list[dict[str, Any]]:
        """One read of a GPU's energy counter: the events it completes (a GPU whose counter
        started again since the last read; or, at the last GPU's first read after a restart
        of the agent, those the restart hid). `driver` reads the driver's version, asked
        only when a counter went down."""
        with self._lock:
            last = self._seen.get(uuid)
            self._seen[uuid] = Seen(energy_mj, now)
            if uuid in self._before:
                self._first[uuid] = (index, energy_mj)
                return self._judge_restart(now)
        events: list[dict[str, Any]] = []
        if last is None:
            pass
        elif energy_mj >= last.energy_mj:
            self._reload_pending.discard(uuid)
        elif uuid in self._reload_pending:  # another GPU saw the driver's version change
            self._reload_pending.discard(uuid)
            events.append(_event(index, DRIVER_RELOAD, now, last.ts, f"driver → {self.driver}"))
        else:
            version = driver()
            if version is not None and self.driver is not None and version != self.driver:
                why = f"driver {self.driver} → {version}"
                events.append(_event(index, DRIVER_RELOAD, now, last.ts, why))
                with self._lock:
                    self._reload_pending = set(self._seen) - {uuid}
            else:
                why = "its energy counter started again"
                events.append(_event(index, GPU_RESET, now, last.ts, why))
            self.driver = version or self.driver
        self.save(now, force=bool(events))
        return events

    def forget(self, uuid: str, now: float) -> list[dict[str, Any]]:
        """A GPU that will not be read again (it fell off the bus): not waited for."""
        with self._lock:
            if self._before.pop(uuid, None) is None:
                return []
            self._gpus -= 1
            return self._judge_restart(now)

    def _judge_restart(self, now: float) -> list[dict[str, Any]]:
        """Once every GPU known before the restart has been read (under the lock)."""
        if set(self._first) < set(self._before):
            return []
        lower = {
            uuid: (index, self._before[uuid])
            for uuid, (index, mj) in self._first.items()
            if uuid in self._before and mj < self._before[uuid].energy_mj
        }
        self._before, self._first = {}, {}
        if len(lower) == self._gpus > 1:
            kind, why = DRIVER_RELOAD, "every GPU's energy counter started again"
        else:
            kind, why = GPU_RESET, "its energy counter started again"
        return [_event(i, kind, now, before.ts, why) for i, before in lower.values()]

    # -- the state file ----------------------------------------------------------------------

    def save(self, now: float, force: bool = False) -> None:
        if self.state_path is None or (not force and now - self._saved_at < SAVE_EVERY_S):
            return
        with self._lock:
            state = {
                "boot": self.boot,
                "driver": self.driver,
                "gpus": {u: {"energy_mj": s.energy_mj, "ts": s.ts} for u, s in self._seen.items()},
            }
            self._saved_at = now
        tmp = self.state_path.with_suffix(".tmp")
        try:
            self.state_path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(state))
            os.replace(tmp, self.state_path)
        except OSError as exc:  # a read-only disk must not stop the readings
            log.warning("GPU reset state not saved", path=str(self.state_path), error=str(exc))
            with contextlib.suppress(OSError):
                tmp.unlink()

    def _load(self) -> dict[str, Any] | None:
        """The state the agent left, or None (none, or unreadable: nothing is judged)."""
        if self.state_path is None:
            return None
        try:
            raw = json.loads(self.state_path.read_text())
            gpus = {
                str(uuid): Seen(int(s["energy_mj"]), float(s["ts"]))
                for uuid, s in raw["gpus"].items()
            }
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return None
        return {"boot": raw.get("boot"), "driver": raw.get("driver"), "gpus": gpus}


def _event(index: int, kind: str, now: float, since: float, why: str) -> dict[str, Any]:
    return {
        "ts": round(now, 3),
        "gpu": index,
        "kind": kind,
        "detail": f"{why} (seen between {_utc(since)} and {_utc(now)})",
    }


def _utc(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
