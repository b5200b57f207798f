"""The energy ledger's states and the thresholds that decide them: data, in one place.

Every figure the ledger's SQL (fleet/read/ledger_sql.py) compares against comes from a
`LedgerRules`; the defaults below are Fleetwatch's choice, each with its reason. docs/ledger.md
says what each state means.
"""

from __future__ import annotations

from dataclasses import dataclass

# A GPU-minute's state, in the order they are decided: the first that applies wins.
LOST = "lost_or_down"  # no utilisation and no power in the minute (or no row at all)
UNALLOCATED = "unallocated"  # no workload holds it
STALLED = "stalled"  # held, utilisation high, power low, for `stall_minutes`
IDLE_HELD_MEMORY = "idle_held_memory"  # held, idle, a process holds memory
ALLOCATED_IDLE = "allocated_idle"  # held, idle, nothing holds memory
BUSY = "busy"  # held and used

STATES: tuple[str, ...] = (BUSY, ALLOCATED_IDLE, IDLE_HELD_MEMORY, STALLED, UNALLOCATED, LOST)
# States a holder has the GPU in: charged to it, but for the idle ones where the site
# charges idle energy to the pool (`Site.idle_energy_to`); the rest is the pool's.
HELD_STATES: tuple[str, ...] = (BUSY, ALLOCATED_IDLE, IDLE_HELD_MEMORY, STALLED)
# Held and doing nothing: an allocation running nothing, or a process holding memory on an
# idle GPU. Both are GPUs someone could reclaim.
IDLE_STATES: tuple[str, ...] = (ALLOCATED_IDLE, IDLE_HELD_MEMORY)


@dataclass(frozen=True, slots=True)
class LedgerRules:
    """Thresholds of the ledger's states. Power thresholds are a fraction of the GPU's
    enforced power limit in that minute (`power_limit_w`), or the watts given where the limit
    is not reported: an H100's idle draw (60–90 W) is a tenth of its 700 W limit, an L4's
    (16 W) a fifth of its 72 W."""

    idle_util_pct: float = 5.0  # the minute's highest utilisation stays below this
    idle_power_fraction: float = 0.25  # and its mean power at most this share of the limit
    idle_power_w: float = 120.0  # … or this, when the limit is unknown
    idle_minutes: int = 10  # for at least this long, without a break
    held_memory_mib: float = 1024.0  # framebuffer in use at or above this: memory held
    stall_util_pct: float = 90.0  # a hung collective spins its SMs at full utilisation
    stall_power_fraction: float = 0.35  # while the GPU draws little: no math is done
    stall_power_w: float = 200.0  # … the watts where the limit is unknown
    stall_minutes: int = 5  # a collective hung this long is no longer a slow step

    @property
    def lookback_s(self) -> int:
        """How far around a window the minutes are read, so a run of idle or stalled
        minutes that began before it (or ends after it) counts whole."""
        return 60 * max(self.idle_minutes, self.stall_minutes)


DEFAULT_RULES = LedgerRules()
