"""Silences and maintenance windows from the dashboard: operators add them, and end a
silence early, without the admin.

A silence's matchers are typed one per line (`rack=A01`, `rule=~gpu-.*`) and checked by
fleet/alerts/muting.py, whose refusals show next to the field; nothing is saved while
anything is wrong. The author is the signed-in person. An operator of some sites only
may mute only those: a silence must then carry `site=<one of them>`, and a maintenance
window may name only their sites, racks and nodes (fleet/access.py).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from fleet.access import can_operate, operated_site_ids
from fleet.alerts.models import MaintenanceWindow, Silence
from fleet.alerts.muting import OPS, silence_errors
from fleet.models import CoolingLoop, Node, Rack, Site

__all__ = (
    "MaintenanceForm",
    "SilenceForm",
    "maintenance_form",
    "may_end",
    "operated_site_names",
    "parse_duration",
    "parse_matcher_lines",
    "silence_form",
    "silence_sites",
)

# Longest operator first, so `=~` is not read as `=` followed by a value "~…".
_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$")
_DURATION = re.compile(r"^\s*(?:(\d+)\s*d)?\s*(?:(\d+)\s*h)?\s*(?:(\d+)\s*m(?:in)?)?\s*$")
MAX_MUTE = dt.timedelta(days=31)
_WHEN = forms.DateTimeInput(attrs={"type": "datetime-local", "step": 60}, format="%Y-%m-%dT%H:%M")


# Reading what was typed -----------------------------------------------------------------


def parse_matcher_lines(text: str) -> tuple[list[dict[str, str]], list[str]]:
    """`label op value` lines as the matcher dicts a Silence stores, and one message per
    line that is not a matcher. A value may be quoted: `rack="A 01"`."""
    matchers: list[dict[str, str]] = []
    errors: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        found = _LINE.match(line)
        if found is None:
            errors.append(
                f"line {n}: {line.strip()!r} is not label=value, label!=value,"
                " label=~regex or label!~regex"
            )
            continue
        label, op, value = found.groups()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        matchers.append({"label": label, "op": op, "value": value})
    return matchers, errors


def parse_duration(text: str) -> dt.timedelta | None:
    """ "2h", "90m", "1d 4h", "1h30m" as a timedelta; None when it is not one."""
    found = _DURATION.match(text)
    if found is None or not any(found.groups()):
        return None
    days, hours, minutes = (int(g or 0) for g in found.groups())
    return dt.timedelta(days=days, hours=hours, minutes=minutes)


def silence_sites(matchers: Any) -> set[str]:
    """The site names a silence is pinned to with `site=<name>` matchers."""
    if not isinstance(matchers, list):
        return set()
    return {
        str(m.get("value"))
        for m in matchers
        if isinstance(m, dict) and m.get("label") == "site" and m.get("op") == "="
    }


def operated_site_names(user: Any) -> set[str] | None:
    """Names of the sites `user` operates (None: every site): what silences match on."""
    sites = operated_site_ids(user)
    if sites is None:
        return None
    return set(Site.objects.filter(pk__in=sites).values_list("name", flat=True))


def may_end(user: Any, silence: Silence) -> bool:
    names = operated_site_names(user)
    return names is None or bool(silence_sites(silence.matchers) & names)


# Forms ----------------------------------------------------------------------------------


class SilenceForm(forms.Form):
    matchers = forms.CharField(
        label="Matchers, one per line",
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
        help_text="All must match. Operators: " + " ".join(OPS) + ". Labels: site, hall,"
        " rack, node, gpu, loop, feed, rule, severity, scope. E.g. rack=A01 and"
        " rule=~gpu-.*",
    )
    starts_at = forms.DateTimeField(
        label="Starts (UTC)", widget=_WHEN, required=False, help_text="blank: now"
    )
    ends_at = forms.DateTimeField(label="Ends (UTC)", widget=_WHEN, required=False)
    duration = forms.CharField(
        label="or for",
        required=False,
        max_length=20,
        help_text="e.g. 2h, 90m, 1d 4h; used when no end is given",
    )
    comment = forms.CharField(label="Why", max_length=300, help_text="the work, the ticket")

    def __init__(self, *args: Any, sites: set[str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.operated_sites = sites  # None: may mute every site

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "matchers" not in data:
            return data
        matchers, line_errors = parse_matcher_lines(data["matchers"])
        for message in line_errors:
            self.add_error("matchers", message)
        starts = data.get("starts_at") or timezone.now()
        ends = self._end(starts, data)
        if line_errors:
            return data
        for field, errors in silence_errors(matchers, starts, ends).items():
            for message in errors:
                self.add_error(field if field in self.fields else None, message)
        self._check_sites(matchers)
        data.update(matchers_list=matchers, starts_at=starts, ends_at=ends)
        return data

    def _end(self, starts: dt.datetime, data: dict[str, Any]) -> dt.datetime | None:
        if data.get("ends_at"):
            end: dt.datetime = data["ends_at"]
        else:
            length = parse_duration(data.get("duration") or "")
            if length is None:
                self.add_error("duration", "give an end, or a duration such as 2h or 90m")
                return None
            end = starts + length
        if end - starts > MAX_MUTE:
            self.add_error("ends_at", "at most 31 days: a longer mute hides a real problem")
        return end

    def _check_sites(self, matchers: list[dict[str, str]]) -> None:
        if self.operated_sites is None or silence_sites(matchers) & self.operated_sites:
            return
        mine = ", ".join(f"site={name}" for name in sorted(self.operated_sites))
        self.add_error("matchers", f"you operate only some sites: add one of {mine}")


class MaintenanceForm(forms.ModelForm):  # type: ignore[type-arg]
    node_name = forms.CharField(label="or node (hostname)", required=False, max_length=100)

    class Meta:
        model = MaintenanceWindow
        fields = ("site", "rack", "loop", "starts_at", "ends_at", "comment")
        labels = {
            "site": "Site",
            "rack": "or rack",
            "loop": "or cooling loop (and what it cools)",
            "starts_at": "Starts (UTC)",
            "ends_at": "Ends (UTC)",
            "comment": "Why",
        }
        widgets = {"starts_at": _WHEN, "ends_at": _WHEN}

    def __init__(self, *args: Any, sites: set[int] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.operated_sites = sites  # None: every site
        site_field: Any = self.fields["site"]
        rack_field: Any = self.fields["rack"]
        loop_field: Any = self.fields["loop"]
        site_field.queryset = _mine(Site.objects.all(), sites, "pk")
        rack_field.queryset = _mine(Rack.objects.select_related("hall__site"), sites, "hall__site")
        loop_field.queryset = _mine(CoolingLoop.objects.select_related("site"), sites, "site")
        self.fields["starts_at"].initial = timezone.now().replace(second=0, microsecond=0)
        self.order_fields(["site", "rack", "node_name", "loop", "starts_at", "ends_at", "comment"])

    def clean_node_name(self) -> Node | None:
        name = (self.cleaned_data.get("node_name") or "").strip()
        if not name:
            return None
        node = _mine(Node.objects.all(), self.operated_sites, "rack__hall__site").filter(name=name)
        found: Node | None = node.first()
        if found is None:
            raise forms.ValidationError(f"no node {name!r} at a site you operate")
        return found

    def _post_clean(self) -> None:
        # The node is chosen by name; put it on the window before the model's own checks
        # (exactly one of site, rack, node; ends after it starts) run.
        self.instance.node = self.cleaned_data.get("node_name")
        super()._post_clean()  # type: ignore[misc]


def _mine(queryset: Any, sites: set[int] | None, site_path: str) -> Any:
    return queryset if sites is None else queryset.filter(**{f"{site_path}__in": sites})


# Views ----------------------------------------------------------------------------------


def _operator_only(request: HttpRequest) -> None:
    if not can_operate(request.user):
        raise PermissionDenied("only operators may mute alerts")


@login_required
@require_http_methods(["GET", "POST"])
def silence_form(request: HttpRequest) -> HttpResponse:
    """A new silence; a POST naming `end` ends that silence now instead (the alerts page's
    "end now" button)."""
    _operator_only(request)
    if request.method == "POST" and "end" in request.POST:
        return end_silence(request)
    sites = operated_site_names(request.user)
    form = SilenceForm(request.POST or None, sites=sites, initial=_prefill(request))
    if request.method == "POST" and form.is_valid():
        silence = Silence.objects.create(
            matchers=form.cleaned_data["matchers_list"],
            starts_at=form.cleaned_data["starts_at"],
            ends_at=form.cleaned_data["ends_at"],
            comment=form.cleaned_data["comment"],
            created_by=request.user.get_username(),
        )
        messages.success(request, f"Silence {silence.pk} added: {silence}.")
        return HttpResponseRedirect(reverse("alerts"))
    return render(request, "dashboard/silence_form.html", {"form": form})


def _prefill(request: HttpRequest) -> dict[str, Any]:
    # "Silence like this" links from the alerts page carry the matchers in the query.
    return {"matchers": request.GET.get("matchers", ""), "duration": "2h"}


def _place_prefill(request: HttpRequest) -> dict[str, Any]:
    # An incident's "plan maintenance of rack A01…" link names its place by id; a choice
    # the person may not make (another site's rack) is not among the form's and stays empty.
    return {
        name: request.GET[name]
        for name in ("site", "rack", "loop")
        if request.GET.get(name, "").isdigit()
    }


def end_silence(request: HttpRequest) -> HttpResponse:
    try:
        pk = int(request.POST["end"])
    except ValueError:
        return HttpResponse("end: not a silence id", status=400)
    silence = get_object_or_404(Silence, pk=pk)
    if not may_end(request.user, silence):
        raise PermissionDenied("that silence mutes sites you do not operate")
    now = timezone.now()
    ended = Silence.objects.filter(pk=pk, ends_at__gt=now).update(
        ends_at=now, starts_at=min(silence.starts_at, now)
    )
    if ended:
        messages.success(request, f"Silence {pk} ended: its alerts are announced again.")
    else:
        messages.error(request, f"Silence {pk} had already ended.")
    return HttpResponseRedirect(reverse("alerts"))


@login_required
@require_http_methods(["GET", "POST"])
def maintenance_form(request: HttpRequest) -> HttpResponse:
    """A new maintenance window on one site, rack, node or cooling loop."""
    _operator_only(request)
    form = MaintenanceForm(
        request.POST or None,
        sites=operated_site_ids(request.user),
        initial=_place_prefill(request),
    )
    if request.method == "POST" and form.is_valid():
        window = form.save(commit=False)
        window.created_by = request.user.get_username()
        window.save()
        messages.success(request, f"Planned: {window}, until {window.ends_at:%Y-%m-%d %H:%M} UTC.")
        return HttpResponseRedirect(reverse("alerts"))
    return render(request, "dashboard/maintenance_form.html", {"form": form})
