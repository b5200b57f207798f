"""The capacity question — "can rack X take N more servers of model M?" — as the capacity
page's form and the answer API read it from the query string, answered by
`fleet.read.capacity_answer.can_take` (the page renders what this sends; nothing is
computed in the browser). The form's choices: the racks of the sites the user may see, and
the server models those sites know with their measured (else rated) power.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from django.http import HttpRequest

from dashboard.power import visible_sites
from fleet.models import Rack
from fleet.read.capacity_answer import (
    MAX_SERVERS,
    Answer,
    CapacityQuestionError,
    Constraint,
    can_take,
)
from fleet.read.headroom import KnownModel, known_models
from fleet.words import power_words

# The query's fields; any of them present makes a request a question.
FIELDS = ("rack", "servers", "model", "watts", "units")
NO_SUCH_RACK = "no such rack"  # also for a rack of a site the user may not see: no leak


def question(request: HttpRequest) -> tuple[int, int, str, float | None, int | None]:
    """The API's and the form's question, from the query string (CapacityQuestionError:
    what is wrong with it)."""
    params = request.GET

    def number(name: str, kind: type[int] | type[float], required: bool) -> Any:
        raw = params.get(name, "").strip()
        if not raw:
            if required:
                raise CapacityQuestionError(name, "required")
            return None
        try:
            value = kind(raw)
        except ValueError:
            raise CapacityQuestionError(name, f"not a number: {raw!r}") from None
        if not value > 0 or (kind is float and not math.isfinite(value)):
            raise CapacityQuestionError(name, "must be positive")
        return value

    model = params.get("model", "").strip()
    if not model:
        raise CapacityQuestionError("model", "required (e.g. HGX H200 8-GPU)")
    return (
        number("rack", int, True),
        number("servers", int, True),
        model,
        number("watts", float, False),
        number("units", int, False),
    )


def answer_for(request: HttpRequest) -> Answer | None:
    """The answer to the request's question; None (the caller's 404) for a rack that does
    not exist or is in a site the user may not see."""
    rack_id, servers, model, watts, units = question(request)
    site = Rack.objects.filter(pk=rack_id).values_list("hall__site_id", flat=True).first()
    if site is None or site not in {s for s, _ in visible_sites(request.user)}:
        return None
    return can_take(rack_id, servers, model, time.time(), watts=watts, units=units)


@dataclass
class ModelChoice:
    """A model in the form's list, with its power at each site that knows it."""

    name: str
    powers: list[str] = field(default_factory=list)  # "Demo: 10.0 kW measured"

    @property
    def label(self) -> str:
        return f"{self.name} ({'; '.join(self.powers)})" if self.powers else self.name


def model_power_words(known: KnownModel) -> str:
    if known.power is None:
        return "no measured or rated power: give watts"
    return f"{power_words(known.power.w)} {known.power.source}"


def model_choices(sites: list[tuple[int, str]], now: float) -> list[ModelChoice]:
    """Every model the user's sites know, the most common first, each with its power there."""
    choices: dict[str, ModelChoice] = {}
    for site_id, site_name in sites:
        for known in known_models(site_id, now):
            choice = choices.setdefault(known.name, ModelChoice(known.name))
            choice.powers.append(f"{site_name}: {model_power_words(known)}")
    return list(choices.values())


@dataclass
class Asked:
    """The form as the page renders it: its choices, what was asked, and the answer or why
    there is none (`status`: the page's HTTP status)."""

    racks: list[tuple[str, list[tuple[int, str]]]]  # per site: (rack id, rack name)
    models: list[ModelChoice]
    values: dict[str, str]
    max_servers: int = MAX_SERVERS
    answer: Answer | None = None
    error: str = ""
    status: int = 200

    @property
    def asked(self) -> bool:
        return bool(self.answer or self.error)

    @property
    def words(self) -> dict[str, Any] | None:
        return None if self.answer is None else answer_words(self.answer)


def rack_choices(sites: list[tuple[int, str]]) -> list[tuple[str, list[tuple[int, str]]]]:
    names = dict(sites)
    by_site: dict[int, list[tuple[int, str]]] = {s: [] for s, _ in sites}
    racks = Rack.objects.filter(hall__site_id__in=names).order_by("hall__site__name", "name")
    for rack_id, rack_name, site_id in racks.values_list("pk", "name", "hall__site_id"):
        by_site[site_id].append((rack_id, rack_name))
    return [(names[s], by_site[s]) for s, _ in sites]


def ask(request: HttpRequest, now: float) -> Asked:
    """The form for the request, answered when the query asks a question."""
    sites = visible_sites(request.user)
    form = Asked(
        racks=rack_choices(sites),
        models=model_choices(sites, now),
        values={f: request.GET.get(f, "").strip() for f in FIELDS},
    )
    if not any(form.values.values()):
        return form
    try:
        form.answer = answer_for(request)
    except CapacityQuestionError as exc:
        form.error, form.status = f"Cannot answer: {exc.field} — {exc.reason}.", 400
        return form
    if form.answer is None:
        form.error, form.status = f"Cannot answer: {NO_SUCH_RACK}.", 404
    return form


def figure(value: float | None, unit: str) -> str:
    """A constraint's figure as the page says it (kW to one decimal, whole units)."""
    if value is None:
        return "no measured draw"
    return f"{value:.1f} kW" if unit == "kW" else f"{value:.0f} U"


@dataclass(frozen=True)
class ConstraintRow:
    """One constraint of an answer as the page's table says it."""

    c: Constraint
    binding: bool

    @property
    def limit(self) -> str:
        return figure(self.c.limit, self.c.unit)

    @property
    def used(self) -> str:
        return figure(self.c.used, self.c.unit)

    @property
    def added(self) -> str:
        return figure(self.c.added, self.c.unit)

    @property
    def margin(self) -> str:
        return figure(self.c.margin, self.c.unit)

    @property
    def fits(self) -> str:
        return "–" if self.c.fits is None else str(self.c.fits)


YES_NO = {True: "Yes", False: "No", None: "Unknown"}


def answer_words(answer: Answer) -> dict[str, Any]:
    """The answer as the page renders it."""
    binding = answer.binding
    return {
        "verdict": YES_NO[answer.yes],
        "yes": {True: "yes", False: "no", None: "unknown"}[answer.yes],
        "binding": None if binding is None else binding.name,
        "binding_margin": None if binding is None else figure(binding.margin, binding.unit),
        "binding_fits": None if binding is None else binding.fits,
        "server": f"{power_words(answer.server_w)} each ({answer.server_w_from})",
        "p95": figure(answer.p95_kw, "kW"),
        "p99": figure(answer.p99_kw, "kW"),
        "rows": [ConstraintRow(c, c is binding) for c in answer.constraints],
    }
