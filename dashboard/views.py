"""Pages for ops staff. Every page needs a login."""

from __future__ import annotations

import time

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from dashboard.alerts import alerts_page, can_acknowledge
from dashboard.cooling import cooling_page
from dashboard.muting import operated_site_names
from dashboard.overview import database_disk, remote_write
from dashboard.overview import fleet_overview as build_overview
from dashboard.rack import rack_page
from fleet.access import can_view_site, operated_site_ids, visible_site_ids
from fleet.alerts.acks import acknowledge, acknowledge_incident
from fleet.alerts.models import AlertGroup, AlertInstance
from fleet.models import Rack


@login_required
def fleet_overview(request: HttpRequest) -> HttpResponse:
    now = time.time()
    halls, payload = build_overview(now, visible_site_ids(request.user))
    context = {
        "halls": halls,
        "payload": payload,
        "rack_count": sum(len(racks) for racks in halls.values()),
        "database": database_disk(now),
        "remote_write": remote_write(now),
    }
    return render(request, "dashboard/fleet.html", context)


@login_required
@require_GET
def rack(request: HttpRequest, rack_id: int) -> HttpResponse:
    """One rack as of now; the page then follows it live (/ws/live/rack/<id>)."""
    site_id = Rack.objects.filter(id=rack_id).values_list("hall__site_id", flat=True).first()
    if site_id is None or not can_view_site(request.user, site_id):
        raise Http404("no such rack")
    page = rack_page(rack_id, time.time())
    if page is None:
        raise Http404("no such rack")
    return render(request, "dashboard/rack.html", {"rack": page})


@login_required
@require_GET
def cooling(request: HttpRequest) -> HttpResponse:
    """Every CDU loop the user may see and the racks it serves, as of now; the page then
    follows them live (/ws/live/cooling)."""
    page = cooling_page(time.time(), visible_site_ids(request.user))
    return render(request, "dashboard/cooling.html", {"page": page})


@login_required
@require_GET
def alerts(request: HttpRequest) -> HttpResponse:
    """Alerts of the sites the person sees; acknowledge and mute controls for operators,
    on the alerts of the sites they operate."""
    operator = can_acknowledge(request.user)
    context = alerts_page(
        timezone.now(),
        show_urls=operator,
        sites=visible_site_ids(request.user),
        operated=operated_site_ids(request.user),
    )
    names = operated_site_names(request.user)
    for row in context["silences"]:
        row["endable"] = operator and (names is None or bool(row["sites"] & names))
    context["can_acknowledge"] = operator
    context["now_text"] = f"{context['now']:%H:%M:%S} UTC"
    # static/dashboard/alerts.js refreshes the page's region for this person (their
    # controls, their CSRF tokens) on each live push and every few seconds.
    if request.GET.get("part") == "live":
        return render(request, "dashboard/alerts_live.html", context)
    return render(request, "dashboard/alerts.html", context)


@login_required
@require_POST
def acknowledge_alerts(request: HttpRequest) -> HttpResponse:
    """Acknowledge the ticked alerts, or a whole incident (`incident`: its group's id),
    with a reason (operators of its site only)."""
    if not can_acknowledge(request.user):
        return JsonResponse({"error": "only operators may acknowledge alerts"}, status=403)
    if "incident" in request.POST:
        return _acknowledge_incident(request)
    try:
        ids = [int(v) for v in request.POST.getlist("alert")]
    except ValueError:
        return JsonResponse({"error": "alert: not an alert id"}, status=400)
    if not ids:
        messages.error(request, "Tick the alerts to acknowledge.")
        return HttpResponseRedirect(reverse("alerts"))
    refused = _not_operated(request, ids)
    if refused:
        return JsonResponse(
            {"error": f"alert {refused[0]}: you do not operate its site"}, status=403
        )
    try:
        done = acknowledge(ids, request.user.get_username(), request.POST.get("comment", ""))
    except ValueError as exc:
        messages.error(request, f"Not acknowledged: {exc}.")
        return HttpResponseRedirect(reverse("alerts"))
    messages.success(request, f"{done} alert(s) acknowledged: repeats stop, they still resolve.")
    return HttpResponseRedirect(reverse("alerts"))


def _acknowledge_incident(request: HttpRequest) -> HttpResponse:
    raw = request.POST.get("incident", "")
    if not raw.isdigit():
        return JsonResponse({"error": "incident: not an incident id"}, status=400)
    group = AlertGroup.objects.filter(pk=int(raw)).first()
    visible, operated = visible_site_ids(request.user), operated_site_ids(request.user)
    if group is None or (visible is not None and group.site_id not in visible):
        return JsonResponse({"error": f"incident {raw}: no such incident"}, status=404)
    if operated is not None and group.site_id not in operated:
        return JsonResponse({"error": f"incident {raw}: you do not operate its site"}, status=403)
    who, why = request.user.get_username(), request.POST.get("comment", "")
    try:
        done = acknowledge_incident(group.pk, who, why)
    except ValueError as exc:
        messages.error(request, f"Not acknowledged: {exc}.")
        return HttpResponseRedirect(reverse("alerts"))
    messages.success(
        request,
        f"Incident acknowledged ({done} alert(s) of it): repeats stop, they still resolve.",
    )
    return HttpResponseRedirect(reverse("alerts"))


def _not_operated(request: HttpRequest, ids: list[int]) -> list[int]:
    """The alerts among `ids` at a site the person does not operate (an unknown id is left
    to acknowledge(), which names it)."""
    sites = operated_site_ids(request.user)
    if sites is None:
        return []
    found = AlertInstance.objects.filter(pk__in=ids).values_list("pk", "site_id")
    return sorted(pk for pk, site in found if site not in sites)
