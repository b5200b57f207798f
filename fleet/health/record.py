"""A GPU's health record and what to do about it: *healthy*, *watch*, *reset needed* or
*replace*, each with the evidence that put it there.

This module owns the states, the criteria and their thresholds, and the public source each
criterion rests on (docs/gpu-health.md lists them with their URLs). It judges, it does not
read: `fleet.read.health_record` gathers the facts (events, latest state, the 1m/1h tiers)
into `GpuFacts`; `judge` turns them into a `Verdict`. Pages, the CSV and the alert rules
all take the state and its words from here.

Counts that NVIDIA keeps per driver load (volatile ECC, XIDs as an operator counts them)
start again at the GPU's last reset: the record holds what happened *since*, never an
ever-growing total. Episodes that judge a GPU over time (off the bus) are counted over
their own window, resets or not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from fleet.health.lost import OFF_THE_BUS_XID
from fleet.health.lost import RESET_NEEDED as RESET_NEEDED  # the word is lost.py's
from fleet.health.peers import PeerComparison

# -- the states, mildest first -------------------------------------------------------------

HEALTHY = "healthy"
WATCH = "watch"
REPLACE = "replace"
STATES = (HEALTHY, WATCH, RESET_NEEDED, REPLACE)  # RESET_NEEDED: fleet.health.lost's word
ACT_ON = (RESET_NEEDED, REPLACE)  # the states the "GPUs to act on" page lists
STATE_LEVELS = {HEALTHY: "ok", WATCH: "warn", RESET_NEEDED: "crit", REPLACE: "crit"}
STATE_ACTIONS = {
    HEALTHY: "nothing to do",
    WATCH: "keep an eye on it: nothing to do yet",
    RESET_NEEDED: "drain it, then reset the GPU (nvidia-smi -r) or reboot the node",
    REPLACE: "drain it, run NVIDIA's field diagnostic, and open an RMA with the evidence",
}

# -- the public sources the criteria rest on (docs/gpu-health.md, "Sources") ---------------

SOURCES: dict[str, str] = {
    "xid-catalog": "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html",
    "xid-mapping": (
        "https://github.com/NVIDIA/NVSentinel/blob/6f8b0fcf/distros/kubernetes/nvsentinel/"
        "charts/gpu-health-monitor/xiderrorsmapping.csv"
    ),
    "row-remapping": ("https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/row-remapping.html"),
    "remap-rma": (
        "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/"
        "rma-policy-thresholds-for-row-remapping.html"
    ),
    "xid-checks": "https://docs.nvidia.com/health-validation/reference/checks/xid.md",
    "thermal": "https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html",
    "page-retirement": "https://docs.nvidia.com/deploy/dynamic-page-retirement/index.html",
    "retired-pages-limit": (
        "https://github.com/NVIDIA/DCGM/blob/28bfbd4c97413d4aec249cdd9543a67d24f95b78/"
        "common/DcgmGPUHardwareLimits.h"
    ),
    "fleetwatch": "docs/gpu-health.md#fleetwatchs-own-rules",
}

# -- the criteria's thresholds (one owner) -------------------------------------------------

# XIDs whose immediate action in NVIDIA's catalog is RESET_GPU (NVSentinel's copy of it).
RESET_XIDS = frozenset({46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158})
# XIDs whose immediate action is to reboot the node (RESTART_BM); 79, off the bus, also
# counts as an episode of its own (two in a week: replace).
REBOOT_XIDS = frozenset({OFF_THE_BUS_XID, 160})
# XIDs about the GPU's memory or links worth watching: 48 DBE (its workflow), 63 a row
# remap recorded, 74 NVLink, 92 many single-bit errors, 94 a contained memory error.
WATCH_XIDS = frozenset({48, 63, 74, 92, 94})
# XIDs the catalog says to report to NVIDIA (61: the PMU hit a breakpoint).
REPLACE_XIDS = frozenset({61})
OFF_THE_BUS_WINDOW_S = 7 * 86_400  # "fell off the bus twice in a week"
OFF_THE_BUS_REPLACE = 2  # episodes in that window
EPISODE_GAP_S = 600.0  # off-the-bus events closer than this are one episode
RECORD_WINDOW_S = 30 * 86_400  # XIDs, resets and thermal time are read this far back
THERMAL_SLOWDOWN_WATCH_H = 1.0  # hours held down by thermal slowdown in the window
# Page retirement (pre-Ampere GPUs): NVIDIA's DCGM fails a GPU's memory health check at 63
# retired pages in all (DCGM_LIMIT_MAX_RETIRED_PAGES, "updated to match the field diag", the
# diagnostic an RMA needs) and holds more than 15 pages retired for double-bit errors as its
# soft limit (DCGM_LIMIT_MAX_RETIRED_PAGES_SOFT_LIMIT: a failure once they still rise by more
# than one a week, which the record does not track; so: watch).
RETIRED_PAGES_REPLACE = 63
RETIRED_DBE_PAGES_WATCH = 15  # more than this


@dataclass(frozen=True, slots=True)
class XidCount:
    code: int
    count: int
    first_ts: float
    last_ts: float


@dataclass(frozen=True, slots=True)
class Evidence:
    """One criterion met: what it is, what was observed, and the key of its source."""

    criterion: str
    observed: str
    source: str  # a key of SOURCES

    @property
    def url(self) -> str:
        return SOURCES[self.source]


@dataclass(frozen=True, slots=True)
class GpuFacts:
    """What is known of one GPU's health. None: the agent does not send it (or sent nothing
    yet); a figure judged absent is never read as zero."""

    xids: Sequence[XidCount] = ()  # since the last reset, within RECORD_WINDOW_S
    reset_xids_before_reset: frozenset[int] = frozenset()  # RESET_XIDS seen before it
    last_reset_ts: float | None = None  # the newest reset or driver reload seen
    resets: int = 0  # resets and driver reloads seen in RECORD_WINDOW_S
    off_the_bus: Sequence[float] = ()  # start of each off-the-bus episode, RECORD_WINDOW_S
    ecc_sbe_volatile: int | None = None
    ecc_dbe_volatile: int | None = None
    ecc_sbe_aggregate: int | None = None  # the GPU's life (InfoROM)
    ecc_dbe_aggregate: int | None = None
    remapped_correctable: int | None = None
    remapped_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    retired_pages_sbe: int | None = None  # pre-Ampere page retirement
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    # The facts above that the GPU's NVML says it does not have (field names): "not
    # supported", which is neither "not reported" (None, from an older agent) nor 0.
    unsupported: frozenset[str] = frozenset()
    thermal_slowdown_h: float | None = None  # in RECORD_WINDOW_S
    thermal_excursions: int | None = None  # runs of hours past the slowdown limit
    peers: PeerComparison | None = None  # the last hour against its peers (fleet.health.peers)

    @property
    def retired_pages(self) -> int | None:
        """Pages retired for either cause; None unless both counts are known."""
        if self.retired_pages_sbe is None or self.retired_pages_dbe is None:
            return None
        return self.retired_pages_sbe + self.retired_pages_dbe


@dataclass(frozen=True, slots=True)
class Verdict:
    state: str
    evidence: tuple[Evidence, ...] = field(default=())

    @property
    def level(self) -> str:
        return STATE_LEVELS[self.state]

    @property
    def action(self) -> str:
        return STATE_ACTIONS[self.state]


def judge(facts: GpuFacts, now: float) -> Verdict:
    """The worst state any criterion puts the GPU in, with the evidence for that state
    (the milder criteria met are kept after it: they say what else is going on)."""
    found = [
        *_replace(facts, now),
        *_reset_needed(facts),
        *_watch(facts, now),
    ]
    if not found:
        return Verdict(HEALTHY)
    state = max((s for s, _ in found), key=STATES.index)
    return Verdict(state, tuple(e for _, e in sorted(found, key=_worst_first)))


def _worst_first(item: tuple[str, Evidence]) -> int:
    return -STATES.index(item[0])


Found = list[tuple[str, Evidence]]


def _replace(f: GpuFacts, now: float) -> Found:
    out: Found = []
    if f.remap_failure:
        criterion = "row remap failure flag set (RMA once NVIDIA's field diagnostic confirms)"
        out.append((REPLACE, Evidence(criterion, "remap_failure = 1", "remap-rma")))
    episodes = off_the_bus_in(f.off_the_bus, now)
    if len(episodes) >= OFF_THE_BUS_REPLACE:
        criterion = f"fell off the bus {OFF_THE_BUS_REPLACE} times in 7 days"
        observed = f"{len(episodes)} episodes in 7 days"
        out.append((REPLACE, Evidence(criterion, observed, "fleetwatch")))
    total = f.retired_pages
    if total is not None and total >= RETIRED_PAGES_REPLACE:
        criterion = f"{RETIRED_PAGES_REPLACE} or more pages retired (NVIDIA's DCGM fails the GPU)"
        observed = f"{total} pages retired ({f.retired_pages_dbe} for double-bit errors)"
        out.append((REPLACE, Evidence(criterion, observed, "retired-pages-limit")))
    for x in f.xids:
        if x.code in REPLACE_XIDS:
            out.append((REPLACE, _xid_evidence(x, "XID NVIDIA says to report", "xid-catalog")))
        elif x.code in RESET_XIDS and x.code in f.reset_xids_before_reset:
            criterion = "a reset-needing XID came back after a reset (service required)"
            out.append((REPLACE, _xid_evidence(x, criterion, "xid-checks")))
    return out


def _reset_needed(f: GpuFacts) -> Found:
    out: Found = []
    if f.remap_pending:
        criterion = "row remap pending: takes effect at the next GPU reset"
        out.append((RESET_NEEDED, Evidence(criterion, "remap_pending = 1", "row-remapping")))
    if f.retired_pages_pending:
        criterion = "a page is pending retirement: retired at the next driver reload or reboot"
        observed = "retired_pages_pending = 1"
        out.append((RESET_NEEDED, Evidence(criterion, observed, "page-retirement")))
    for x in f.xids:
        if x.code in RESET_XIDS and x.code not in f.reset_xids_before_reset:
            out.append(
                (RESET_NEEDED, _xid_evidence(x, "XID that needs a GPU reset", "xid-mapping"))
            )
        elif x.code in REBOOT_XIDS:
            out.append(
                (RESET_NEEDED, _xid_evidence(x, "XID that needs a node reboot", "xid-mapping"))
            )
    return out


def _watch(f: GpuFacts, now: float) -> Found:
    out: Found = []
    episodes = off_the_bus_in(f.off_the_bus, now)
    if 0 < len(episodes) < OFF_THE_BUS_REPLACE:
        out.append(
            (WATCH, Evidence("fell off the bus in the last 7 days", "1 episode", "fleetwatch"))
        )
    if f.ecc_dbe_volatile:
        observed = f"ecc_dbe_vol_total = {f.ecc_dbe_volatile}"
        out.append(
            (WATCH, Evidence("uncorrectable ECC errors since the reset", observed, "row-remapping"))
        )
    dbe_pages, total = f.retired_pages_dbe, f.retired_pages
    replaced = total is not None and total >= RETIRED_PAGES_REPLACE  # said under replace
    if dbe_pages is not None and dbe_pages > RETIRED_DBE_PAGES_WATCH and not replaced:
        criterion = f"more than {RETIRED_DBE_PAGES_WATCH} pages retired for double-bit errors"
        out.append((WATCH, Evidence(criterion, f"{dbe_pages} pages", "retired-pages-limit")))
    for x in f.xids:
        if x.code in WATCH_XIDS:
            out.append((WATCH, _xid_evidence(x, "XID about memory or links", "xid-catalog")))
    if f.thermal_slowdown_h is not None and f.thermal_slowdown_h >= THERMAL_SLOWDOWN_WATCH_H:
        observed = f"{f.thermal_slowdown_h:.1f} h in 30 days"
        out.append((WATCH, Evidence("held down by thermal slowdown", observed, "thermal")))
    if f.thermal_excursions:
        observed = f"{f.thermal_excursions} in 30 days"
        out.append((WATCH, Evidence("ran past its slowdown temperature", observed, "thermal")))
    if f.peers is not None and f.peers.hotter:
        out.append((WATCH, Evidence("hotter than its peers", _hotter(f.peers), "fleetwatch")))
    if f.peers is not None and f.peers.throttling:
        criterion = "slowed by heat or power brake where its peers are not"
        out.append((WATCH, Evidence(criterion, _throttled(f.peers), "fleetwatch")))
    return out


def _hotter(p: PeerComparison) -> str:
    return (
        f"{p.temp_c:.1f} °C against its peers' median {p.peers_median_c:.1f} °C"
        f" (spread {p.peers_spread_c:.1f} °C, {p.peers} same-model GPUs in its rack)"
        f" at {p.power_w:.0f} W, over the last hour"
    )


def _throttled(p: PeerComparison) -> str:
    mine, theirs = p.throttled_share or 0.0, p.peers_throttled_share or 0.0
    return (
        f"slowed {mine:.0%} of the last hour's minutes against its peers' median {theirs:.0%}"
        f" ({p.peers} same-model GPUs in its rack at {p.power_w:.0f} W)"
    )


def _xid_evidence(x: XidCount, criterion: str, source: str) -> Evidence:
    times = "1 time" if x.count == 1 else f"{x.count} times"
    return Evidence(f"{criterion}: XID {x.code}", f"{times} since the last reset", source)


def off_the_bus_in(starts: Iterable[float], now: float) -> list[float]:
    """The off-the-bus episodes that began within OFF_THE_BUS_WINDOW_S of `now`."""
    return [t for t in starts if now - OFF_THE_BUS_WINDOW_S <= t <= now + 60]


def episodes(times: Iterable[float], gap_s: float = EPISODE_GAP_S) -> list[float]:
    """The start of each run of events no more than `gap_s` apart (an XID 79 and the
    agent's gpu_lost for the same fall are one episode)."""
    starts: list[float] = []
    last: float | None = None
    for t in sorted(times):
        if last is None or t - last > gap_s:
            starts.append(t)
        last = t
    return starts


def worst_state(states: Iterable[str]) -> str:
    """The worst of some GPUs' states (a node's, a site's); healthy when there are none."""
    return max(states, key=STATES.index, default=HEALTHY)


def state_counts(states: Iterable[str]) -> Mapping[str, int]:
    """How many GPUs are in each state, every state named (worst first)."""
    counts = dict.fromkeys(reversed(STATES), 0)
    for s in states:
        counts[s] += 1
    return counts
