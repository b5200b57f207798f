"""Scaffold: the silence_form page is being built (returns 404 until then)."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse


def silence_form(request: HttpRequest) -> HttpResponse:
    raise Http404("not built yet")


def maintenance_form(request: HttpRequest) -> HttpResponse:
    raise Http404("not built yet")
