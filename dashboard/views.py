"""Pages for ops staff. Every page needs a login."""

from __future__ import annotations

import time

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from dashboard.overview import fleet_overview as build_overview


@login_required
def fleet_overview(request: HttpRequest) -> HttpResponse:
    halls, payload = build_overview(time.time())
    context = {
        "halls": halls,
        "payload": payload,
        "rack_count": sum(len(racks) for racks in halls.values()),
    }
    return render(request, "dashboard/fleet.html", context)
