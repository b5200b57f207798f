"""Pages for ops staff. Every page needs a login."""

from __future__ import annotations

import time

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from dashboard.overview import fleet_overview as build_overview
from dashboard.overview import overview_payload


@login_required
def fleet_overview(request: HttpRequest) -> HttpResponse:
    now = time.time()
    racks, nodes, pdu = build_overview(now)
    halls: dict[str, list[object]] = {}
    for rack in racks:
        halls.setdefault(rack.hall, []).append(rack)
    context = {
        "halls": halls,
        "payload": overview_payload(racks, nodes, pdu, now),
        "rack_count": len(racks),
    }
    return render(request, "dashboard/fleet.html", context)
