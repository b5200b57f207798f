"""InfiniBand/RoCE ports judged: flaps, a port down that was up, and error counters rising
faster than a documented rate; and a GPU's NVLink error totals against DCGM's limits. The
thresholds live here, once; the alert rules (fleet/alerts/rulepack_fabric.py, through
fleet/alerts/evaluate_fabric.py and evaluate_nvlink.py) and the node page's port table
(dashboard/fabric.py) read them. docs/rules.md, *Fabric*, gives each its
reason and public source.

Rates come from two checkpoints the ingest writer keeps per port (fleet/storage/fabric.py):
each holds the port's `rises` (each counter's rise since first seen, resets already
accounted for) at a read time. A checkpoint is rolled every RATE_WINDOW_S: the older one
becomes the base, so a rate is measured over the last RATE_WINDOW_S to 2 × RATE_WINDOW_S
of reads, never over a few seconds of noise. Before a port has RATE_WINDOW_S of reads
there is no rate (no value, not 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.protocol.fabric import ACTIVE

# A link flap is a rise in `link_downed` (the link failed to retrain and went down). One in
# FLAP_WINDOW_S is a warning; FLAPPING_COUNT within FLAPPING_WINDOW_S is critical.
FLAP_WINDOW_S = 600.0
FLAPPING_COUNT = 2
FLAPPING_WINDOW_S = 3600.0
# A port down that was up: its state left ACTIVE and stays so for this long (three of the
# agent's 10 s reads) before the rule fires.
PORT_DOWN_FOR_S = 30.0
# A port read longer ago than this is not judged (its agent stopped reading it; silence is
# the agent-silent rule's matter): six of the agent's 10 s fabric reads.
PORT_STALE_S = 60.0

# Rates are measured over RATE_WINDOW_S to twice that.
RATE_WINDOW_S = 300.0


@dataclass(frozen=True, slots=True)
class RateLimit:
    """The rate, per hour, above which a rising error counter is judged a fault."""

    counter: str
    per_hour: float
    signal: str  # the alert signal of the worst port's rate


# Symbol errors: 120 an hour is the IBTA-derived ceiling NVIDIA's NVSentinel NIC-monitor
# design cites (a bit error rate of 10^-12); above it the lanes are degrading (cable,
# transceiver). Receive errors: no public rate; a packet received with a physical error
# counts there too, so it is held to the same ceiling (Fleetwatch's choice). Link error
# recoveries: NVSentinel's degradation rate, 5 a minute (300 an hour).
RATE_LIMITS: tuple[RateLimit, ...] = (
    RateLimit("symbol_error", 120.0, "fabric_symbol_errors_per_h"),
    RateLimit("port_rcv_errors", 120.0, "fabric_rcv_errors_per_h"),
    RateLimit("link_error_recovery", 300.0, "fabric_link_recoveries_per_h"),
)
RATE_BY_COUNTER: dict[str, RateLimit] = {r.counter: r for r in RATE_LIMITS}

SOURCES: dict[str, str] = {
    "nvsentinel": "https://github.com/KaivalyaMDabhadkar/NVSentinel/blob/07697cb/docs/nic-health-monitor/link-counter-detection.md",
    "soperator": "https://github.com/nebius/soperator/blob/cf26a184/helm/slurm-cluster/slurm_scripts/hc_ib_counters.sh",
    "sysfs-abi": "https://www.kernel.org/doc/Documentation/ABI/stable/sysfs-class-infiniband",
    "dcgm-limits": "https://github.com/NVIDIA/DCGM/blob/master/common/DcgmGPUHardwareLimits.h",
    "dcgm-health": "https://github.com/NVIDIA/DCGM/blob/master/modules/health/DcgmHealthWatch.cpp",
}


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A port's `rises` at one read (`ts`), the base of its rates."""

    ts: float
    rises: dict[str, int]

    def as_json(self) -> dict[str, Any]:
        return {"ts": self.ts, "rises": dict(self.rises)}

    @classmethod
    def of(cls, value: Any) -> Checkpoint | None:
        """A checkpoint as stored (JSON), None when there is none or it is malformed."""
        if not isinstance(value, dict) or not isinstance(value.get("ts"), (int, float)):
            return None
        rises = value.get("rises")
        if not isinstance(rises, dict):
            return None
        return cls(float(value["ts"]), {str(k): int(v) for k, v in rises.items()})


def roll(
    base: Checkpoint | None, nxt: Checkpoint | None, ts: float, rises: dict[str, int]
) -> tuple[Checkpoint, Checkpoint]:
    """The checkpoints after a read at `ts` with `rises`: the first read is both; once the
    newer checkpoint is RATE_WINDOW_S old, it becomes the base and this read the newer."""
    here = Checkpoint(ts, dict(rises))
    if base is None or nxt is None:
        return here, here
    if ts - nxt.ts >= RATE_WINDOW_S:
        return nxt, here
    return base, nxt


def rate_per_hour(
    base: Checkpoint | None, ts: float, rises: dict[str, int], counter: str
) -> float | None:
    """How fast `counter` rose from the base checkpoint to the read at `ts`, per hour; None
    without RATE_WINDOW_S of reads behind it or where the port does not support it. (The
    rule pass calls it for every port and counter: plain arithmetic, nothing built.)"""
    value = rises.get(counter)
    if base is None or value is None:
        return None
    span = ts - base.ts
    if span < RATE_WINDOW_S:
        return None
    risen = value - base.rises.get(counter, 0)
    return risen * 3600.0 / span if risen > 0 else 0.0


def over_rate(counter: str, per_hour: float | None) -> bool:
    """The rate is above the counter's documented limit (the rule and the page agree)."""
    limit = RATE_BY_COUNTER.get(counter)
    return limit is not None and per_hour is not None and per_hour > limit.per_hour


def down_after_up(state: str, last_active: float | None) -> bool:
    """The port was ACTIVE at some read and is not now: a link lost, not a port never
    cabled (which is never ACTIVE and is not judged)."""
    return last_active is not None and bool(state) and state != ACTIVE


def port_name(device: str, port: int) -> str:
    """`mlx5_3 port 1`, as pages, events and alerts name a port."""
    return f"{device} port {port}"


# NVLink (the GPU's own links; the agent reads the totals on its slow lane, every 60 s):
# DCGM's health watch fails a GPU whose replay or recovery error count rose at all
# (DCGM_LIMIT_MAX_NVLINK_ERROR, 1), or whose CRC errors rise at 100 a second or more
# (DCGM_LIMIT_MAX_NVLINK_CRC_ERROR: "CRC errors only matter at rates of 100+ per second").
NVLINK_CRC = "nvlink_crc_errors_total"
NVLINK_LINK_ERRORS = ("nvlink_replay_total", "nvlink_recovery_total")
NVLINK_COUNTERS = (NVLINK_CRC, *NVLINK_LINK_ERRORS)
NVLINK_CRC_PER_S = 100.0
NVLINK_ERRORS_MIN = 1
# Latest NVLink totals older than this are not judged: three of the agent's 60 s reads.
NVLINK_STALE_S = 180.0


def rise(before: float | None, after: float) -> float:
    """How much a counter rose from `before` to `after`; after a reset (it reads less),
    all of what it reads now, as the fabric ports count it."""
    if before is None:
        return 0.0
    return after if after < before else after - before
