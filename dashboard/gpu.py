"""Scaffold: the gpu_view page is being built (returns 404 until then)."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse


def gpu_view(request: HttpRequest, gpu_id: int) -> HttpResponse:
    raise Http404("not built yet")


def plotly_js(request: HttpRequest) -> HttpResponse:
    raise Http404("not built yet")
