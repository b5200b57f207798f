"""Scaffold: the node_view page is being built (returns 404 until then)."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse


def node_view(request: HttpRequest, node_id: int) -> HttpResponse:
    raise Http404("not built yet")
