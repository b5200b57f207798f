"""The collector plugin interface.

A collector is set up once and then asked to `collect()` on its cadence. It
returns a `Reading`: samples keyed by sample kind (`gpu`, `node`, `rack`, `feed`,
`loop`, `facility`) plus optional info and events, all in protocol-v1 shape
(see docs/protocol.md). A collector that raises is reported and skipped for that
tick; it never stops the others.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


class NotPresent(Exception):
    """`setup()` found nothing to read here (no ipmitool, no BMC, no GPU driver on a CPU box).

    Normal on many machines: the collector is left out and `check` says why, but it is not
    reported to the server as a collector error.
    """


@dataclass(slots=True)
class Reading:
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    gpu_info: list[dict[str, Any]] = field(default_factory=list)
    node_info: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    # The `workloads` part: who runs on each GPU (agents/collectors/workloads.py).
    workloads: list[dict[str, Any]] = field(default_factory=list)
    # The `fabric` part: InfiniBand/RoCE ports (agents/collectors/fabric.py).
    fabric: list[dict[str, Any]] = field(default_factory=list)

    def add(self, kind: str, sample: dict[str, Any]) -> None:
        self.samples.setdefault(kind, []).append(sample)

    def merge(self, other: Reading) -> None:
        for kind, rows in other.samples.items():
            self.samples.setdefault(kind, []).extend(rows)
        self.gpu_info.extend(other.gpu_info)
        self.node_info.update(other.node_info)
        self.events.extend(other.events)
        self.workloads.extend(other.workloads)
        self.fabric.extend(other.fabric)


class Collector(Protocol):
    """What every collector plugin provides."""

    name: str
    interval_s: float

    def setup(self) -> None:
        """Open handles, read static facts. May raise: the collector is then disabled."""

    def collect(self, now: float) -> Reading:
        """Read once. `now` is the tick's timestamp to stamp samples with."""
        ...

    def close(self) -> None:
        """Release handles."""


@dataclass(frozen=True, slots=True)
class SlowRead:
    """A read too slow for the tick (it burns milliseconds or sleeps): it runs on the slow
    lane, a thread of its own, every `every_ticks` ticks, `offset` ticks into the cycle so
    that slow reads of different devices do not all land on the same tick. Its reading is
    merged into the next tick's samples.

    A collector offers these through an optional `slow_reads()` method.
    """

    name: str
    every_ticks: int
    offset: int
    read: Callable[[float], Reading]
