"""The in-process half of bench/rules.py: `fleet.alerts.engine.evaluate` timed over several
ticks 10 s apart, with exclusive wall time per phase of the engine, a cProfile of one
steady evaluation, and the alert instances the ticks left."""

from __future__ import annotations

import cProfile
import io
import pstats
import re
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.rules_latest import refresh

ROOT = Path(__file__).resolve().parent.parent
TIMED_EVALS = 11  # the first (creates instances) and five steady ones
EVAL_SPACING_S = 10.0


class PhaseTimer:
    """Exclusive wall time per phase of `evaluate`, by wrapping the engine's module-level
    helpers (looked up at call time) for the length of the bench: a nested phase's time
    is not counted twice."""

    def __init__(self) -> None:
        self.spent: defaultdict[str, float] = defaultdict(float)
        self._stack: list[float] = []  # per open phase: its children's time so far
        self._originals: list[tuple[Any, str, Any]] = []

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._stack.append(0.0)
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                took = time.perf_counter() - started
                children = self._stack.pop()
                self.spent[name] += took - children
                if self._stack:
                    self._stack[-1] += took

        return timed

    def install(self) -> None:
        """Wrap whichever of the engine's helpers exist (the engine is being worked on:
        a helper that is gone is simply not timed on its own)."""
        from fleet.alerts import engine, evaluate_state

        self._patch(evaluate_state.Snapshot, "readings", "read latest state")
        for module, attr, name in (
            (evaluate_state, "gpu_limits", "read GPU limits"),
            (engine, "values_for", "compute signal values"),
            (engine, "assign_groups", "assign groups"),
            (engine, "_write", "write instances + history"),
            (engine, "notify_groups", "notify groups (claims, deliveries)"),
        ):
            if callable(getattr(module, attr, None)):
                self._patch(module, attr, name)

    def _patch(self, owner: Any, attr: str, name: str) -> None:
        original = getattr(owner, attr)
        self._originals.append((owner, attr, original))
        setattr(owner, attr, self.wrap(name, original))

    def uninstall(self) -> None:
        for owner, attr, original in self._originals:
            setattr(owner, attr, original)
        self._originals.clear()

    def take(self) -> dict[str, float]:
        spent, self.spent = dict(self.spent), defaultdict(float)
        return spent


@dataclass
class EvalRun:
    at: float
    seconds: float
    result: dict[str, int]
    phases: dict[str, float]


def timed_evaluations(timer: PhaseTimer, base: float) -> list[EvalRun]:
    """Evaluations at base, base + 10 s, …, each after the latest state is refreshed to
    its time (untimed): the first creates the instances, the rest find them unchanged."""
    from fleet.alerts.engine import evaluate

    runs = []
    for i in range(TIMED_EVALS):
        at = base + i * EVAL_SPACING_S
        refresh(at - 1.0)
        timer.take()
        started = time.perf_counter()
        result = evaluate(at)
        seconds = time.perf_counter() - started
        runs.append(EvalRun(at, seconds, result, timer.take()))
    return runs


def profile_evaluation(at: float, top: int = 15) -> str:
    """One more steady evaluation under cProfile: the hotspots by own time, then by
    cumulative time (file:line(function))."""
    from fleet.alerts.engine import evaluate

    refresh(at - 1.0)
    prof = cProfile.Profile()
    prof.runcall(evaluate, at)
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    # paths relative to the repository (and to site-packages), so file:line reads short
    site = str(Path(cProfile.__file__).parent)
    text = out.getvalue().replace(f"{ROOT}/", "").replace(f"{site}/", "")
    return re.sub(r"\S*/site-packages/", "", text)


def instance_counts() -> list[tuple[str, str, int]]:
    from django.db.models import Count

    from fleet.alerts.models import AlertInstance

    rows = AlertInstance.objects.values_list("rule__key", "state").annotate(n=Count("id"))
    return sorted(rows.order_by())
