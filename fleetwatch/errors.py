"""Error answers for every endpoint: JSON with the field and reason for API callers,
a page in Fleetwatch's look for people.

An API caller is a request under /api/ or one that asks for JSON (`Accept:
application/json` before text/html); agents' endpoints build their own precise JSON
errors (fleet/ingest/views.py) and these handlers only catch what reaches Django's
defaults: an unknown URL, a CSRF refusal, a request Django itself refuses as bad (a
disallowed Host), an exception.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

REASONS = {
    400: "bad request",
    403: "forbidden",
    404: "no such page or entity",
    500: "the server failed; the error is logged",
}


def wants_json(request: HttpRequest) -> bool:
    if request.path.startswith("/api/"):
        return True
    accept = request.headers.get("Accept", "")
    json_at = accept.find("application/json")
    html_at = accept.find("text/html")
    return json_at >= 0 and (html_at < 0 or json_at < html_at)


def error_response(
    request: HttpRequest, status: int, reason: str, field: str = "$"
) -> HttpResponse:
    if wants_json(request):
        body = {"error": {"code": status, "field": field, "reason": reason}}
        return JsonResponse(body, status=status)
    context = {"status": status, "reason": reason, "path": request.path}
    return render(request, "errors/error.html", context, status=status)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return error_response(request, 400, REASONS[400])


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    reason = str(exception) if exception is not None and str(exception) else REASONS[403]
    return error_response(request, 403, reason)


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return error_response(request, 404, REASONS[404], field="path")


def server_error(request: HttpRequest) -> HttpResponse:
    # No template rendering that could fail again: a plain page for people.
    if wants_json(request):
        body = {"error": {"code": 500, "field": "$", "reason": REASONS[500]}}
        return JsonResponse(body, status=500)
    html = "<!doctype html><title>Fleetwatch: server error</title><h1>Server error</h1>"
    return HttpResponse(html + f"<p>{REASONS[500]}.</p>", status=500)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """A form or API POST without a valid CSRF token (e.g. a page left open past its
    session): say so, and how to recover."""
    words = "the form's security token is missing or stale: reload the page and try again"
    return error_response(request, 403, words, field="csrf")
