"""Sample → DOM latencies of bench/freshness.py, from what a page recorded: which tick each
watched figure's text shows (decoded from the agents' power wave), when it first showed
it, and when the first push carrying that tick arrived; with the percentiles printed."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.freshness_agents import BASE_W, STEP_W


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (inf when a value is inf: a sample never shown)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def fmt_s(value: float) -> str:
    return "never" if math.isinf(value) else "n/a" if math.isnan(value) else f"{value:.3f}"


@dataclass
class Tick:
    tick: int
    ts: float
    level: int
    ack_s: float | None


@dataclass
class PageLatency:
    """Per (watched element, tick): when it first showed that tick or a newer one."""

    page: str
    sample_to_dom: list[float] = field(default_factory=list)  # one per GPU sample
    per_key_tick: list[float] = field(default_factory=list)  # one per (element, tick)
    push_first: list[float] = field(default_factory=list)  # first push carrying the tick
    push_built: list[float] = field(default_factory=list)  # … its build started (its `ts`)
    mixed: int = 0  # DOM texts between two levels (nodes straddling ticks)
    never: int = 0  # (element, tick) pairs never shown
    pushes: int = 0
    push_bytes: int = 0


def decode_level(text: str, gpus: int) -> int | None:
    """The tick level a power text shows for `gpus` GPUs all at that level, else None.
    A rack tile shows kW to 0.1 (one node one step off moves it by 0.16 kW), a GPU page
    "300 W"."""
    try:
        value = float(text.split()[0])
    except (ValueError, IndexError):
        return None
    watts, slack = (value, 0.6) if text.split()[1:2] == ["W"] else (value * 1000, 60.0)
    lvl = round((watts / gpus - BASE_W) / STEP_W)
    return lvl if abs(watts - gpus * (BASE_W + STEP_W * lvl)) <= slack else None


@dataclass
class Watch:
    """A figure watched on a page: the GPUs its one tick stands for, its rack."""

    key: str
    selector: str
    gpus: int
    rack: str
    label: str | None = None  # a <dl> figure: the <dt> text


def page_latency(
    page: str, records: dict[str, Any], ticks: list[Tick], start: float, watches: list[Watch]
) -> PageLatency:
    out = PageLatency(page)
    gpus_per_key = {w.key: w.gpus for w in watches}
    # first time each (key, tick) was shown whole: a text maps to the latest tick at
    # that level taken before it appeared
    first: dict[tuple[str, int], float] = {}
    for rec in records["dom"]:
        key, at = rec["key"], rec["at"] / 1000
        if key not in gpus_per_key:
            continue
        lvl = decode_level(rec["text"], gpus_per_key[key])
        if lvl is None:
            out.mixed += rec["text"][:1].isdigit()  # not "–", "not reported"
            continue
        shown = [t for t in ticks if t.level == lvl and t.ts <= at]
        if shown:
            first.setdefault((key, shown[-1].tick), at)
    pushed: dict[tuple[str, float], tuple[float, float]] = {}  # (arrived, built)
    for push in records["pushes"]:
        out.pushes += 1
        out.push_bytes += push["bytes"]
        for key, ts in push["racks"].items():
            pushed.setdefault((key, round(ts, 3)), (push["at"] / 1000, push["ts"] or math.nan))
    for w in watches:
        seen = sorted((t, at) for (k, t), at in first.items() if k == w.key)
        for tick in ticks:
            if tick.ts < start:
                continue
            later = [at for t, at in seen if t >= tick.tick]
            latency = min(later) - tick.ts if later else math.inf
            out.never += not later
            out.per_key_tick.append(latency)
            out.sample_to_dom.extend([latency] * w.gpus)
            push = pushed.get((w.rack, round(tick.ts, 3)))
            if push is not None:
                out.push_first.append(push[0] - tick.ts)
                out.push_built.append(push[1] - tick.ts)
    return out
