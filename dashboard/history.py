"""Scaffold: the history_api page is being built (returns 404 until then)."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse


def history_api(request: HttpRequest) -> HttpResponse:
    raise Http404("not built yet")
