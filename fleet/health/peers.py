"""A GPU compared with its peers: the same model in the same rack (so the same inlet air or
coolant) at similar power, over the last hour of the 1m tier. A GPU that runs clearly
hotter than they do at that power has a cooling fault of its own (a failing cold plate,
dried thermal interface, a blocked heatsink); one that is slowed by heat or its power
brake for much more of the hour than they are is held back where they are not.

This module owns the comparison and its thresholds (docs/gpu-health.md, *Compared with
its peers*, gives their reasons); `fleet.read.health_record` reads each GPU's hour
(`GpuHour`) and `fleet.health.record` turns a flagged comparison into *watch* evidence.
Robust statistics throughout (median, MAD): one hot GPU among its peers must not move
the yardstick it is measured with.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from statistics import median

from agents.protocol import reasons as nvml
from fleet.health.thresholds import THERMAL_REASONS

PEER_WINDOW_S = 3600  # the last hour of the 1m tier
MIN_MINUTES = 30  # minutes of temperature and power a GPU needs in that hour to be compared
MIN_PEERS = 5  # other GPUs at similar power needed for a median worth the name
# "Similar power": within 10 % of the GPU's own mean power, and never closer than 30 W
# (an idle GPU's few tens of watts move more than 10 % with nothing changing).
POWER_BAND_FRACTION = 0.10
POWER_BAND_MIN_W = 30.0
# Hotter: at least 8 °C above the peers' median, and at least 4 spreads (1.4826 × MAD, the
# standard deviation of normal noise) above it, so a noisy rack needs a larger gap.
HOTTER_MIN_C = 8.0
HOTTER_SPREADS = 4.0
MAD_TO_SIGMA = 1.4826
# Throttling where the peers do not: slowed for a quarter of the hour (15 minutes) more
# than the peers' median share.
THROTTLED_SHARE_MORE = 0.25
# The reasons counted: heat (SW/HW thermal slowdown, HW slowdown) and the power brake.
# SW power cap is left out: it is a loaded GPU holding the limit it was set, not a fault.
SLOWDOWN_REASONS = THERMAL_REASONS | nvml.HW_POWER_BRAKE_SLOWDOWN


@dataclass(frozen=True, slots=True)
class GpuHour:
    """One GPU's last hour in the 1m tier: `minutes` with both a temperature and a power
    mean, their means over those minutes, and the minutes with a clock-event reason known
    (`reason_minutes`) of which `throttled_minutes` had a slowdown reason."""

    key: Hashable
    group: Hashable  # (hall, rack, model): its possible peers share it
    minutes: int
    temp_c: float | None
    power_w: float | None
    reason_minutes: int = 0
    throttled_minutes: int = 0

    @property
    def throttled_share(self) -> float | None:
        return self.throttled_minutes / self.reason_minutes if self.reason_minutes else None


@dataclass(frozen=True, slots=True)
class PeerComparison:
    """How a GPU compares with its peers (`peers` of them at similar power)."""

    temp_c: float
    power_w: float
    peers: int
    peers_median_c: float
    peers_spread_c: float  # 1.4826 × MAD of the peers' temperatures
    throttled_share: float | None
    peers_throttled_share: float | None  # median of the peers that report reasons

    @property
    def hotter_by_c(self) -> float:
        return self.temp_c - self.peers_median_c

    @property
    def hotter(self) -> bool:
        """Clearly hotter than its peers at the same power (both thresholds met)."""
        gap = self.hotter_by_c
        return gap >= HOTTER_MIN_C and gap >= HOTTER_SPREADS * self.peers_spread_c

    @property
    def throttling(self) -> bool:
        """Slowed for THROTTLED_SHARE_MORE of the hour more than its peers' median."""
        if self.throttled_share is None or self.peers_throttled_share is None:
            return False
        return self.throttled_share - self.peers_throttled_share >= THROTTLED_SHARE_MORE


def compare(hours: Iterable[GpuHour]) -> dict[Hashable, PeerComparison]:
    """Each GPU with enough minutes and at least MIN_PEERS peers at similar power, compared
    with them; GPUs without are left out (no judgement, never a pass)."""
    groups: dict[Hashable, list[GpuHour]] = {}
    for h in hours:
        if h.minutes >= MIN_MINUTES and h.temp_c is not None and h.power_w is not None:
            groups.setdefault(h.group, []).append(h)
    out: dict[Hashable, PeerComparison] = {}
    for members in groups.values():
        for gpu in members:
            found = _compare(gpu, [p for p in members if p.key != gpu.key and _near(gpu, p)])
            if found is not None:
                out[gpu.key] = found
    return out


def _near(gpu: GpuHour, peer: GpuHour) -> bool:
    assert gpu.power_w is not None and peer.power_w is not None  # filtered by compare
    band = max(POWER_BAND_FRACTION * gpu.power_w, POWER_BAND_MIN_W)
    return abs(peer.power_w - gpu.power_w) <= band


def _compare(gpu: GpuHour, peers: Sequence[GpuHour]) -> PeerComparison | None:
    if len(peers) < MIN_PEERS or gpu.temp_c is None or gpu.power_w is None:
        return None
    temps = [p.temp_c for p in peers if p.temp_c is not None]
    mid = median(temps)
    shares = [s for s in (p.throttled_share for p in peers) if s is not None]
    return PeerComparison(
        temp_c=gpu.temp_c,
        power_w=gpu.power_w,
        peers=len(peers),
        peers_median_c=mid,
        peers_spread_c=MAD_TO_SIGMA * median(abs(t - mid) for t in temps),
        throttled_share=gpu.throttled_share,
        peers_throttled_share=median(shares) if len(shares) >= MIN_PEERS else None,
    )
