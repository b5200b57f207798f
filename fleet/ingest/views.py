"""HTTP endpoints for agents: enrolment, inventory, and ingest (the WebSocket's fallback)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from channels.db import database_sync_to_async
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from agents.protocol import MAX_BATCH_BYTES
from fleet.ingest import guard
from fleet.ingest.auth import SourceIdentity, authenticate_source, bearer_from_meta
from fleet.ingest.enrollment import (
    EnrollmentError,
    inventory_for_site,
    site_for_enrollment_token,
)
from fleet.ingest.enrollment import (
    enroll as enroll_source,
)
from fleet.ingest.link import get_pool
from fleet.ingest.rejections import client_from_meta, log_rejection
from fleet.models import Site

HTTP_WAIT_S = 30.0


def _error(status: int, field: str, reason: str) -> JsonResponse:
    return JsonResponse(
        {"error": {"code": status, "field": field, "reason": reason}}, status=status
    )


def _method_not_allowed(allowed: str) -> JsonResponse:
    response = _error(405, "$", f"method not allowed: use {allowed}")
    response["Allow"] = allowed
    return response


# The longest source a token can be stored for (SourceToken.source).
MAX_SOURCE_CHARS = 220


def _enrol_fields(body: object) -> tuple[object, str] | JsonResponse:
    """The enrolment token and source, or the 400 that names the field at fault."""
    if not isinstance(body, dict):
        return _error(400, "$", "body must be a JSON object")
    source = body.get("source")
    if not isinstance(source, str):
        return _error(400, "source", "required string: the source to enrol, e.g. node:<hostname>")
    if "\x00" in source:
        return _error(400, "source", "must not contain NUL characters")
    if len(source) > MAX_SOURCE_CHARS:
        return _error(400, "source", f"longer than {MAX_SOURCE_CHARS} characters")
    token = body.get("enroll_token")
    if token is not None and not isinstance(token, str):
        return _error(400, "enroll_token", f"must be a string, got {type(token).__name__}")
    return token, source


def _unsupported_media_type() -> JsonResponse:
    reason = f"the body must be JSON: send Content-Type: {guard.JSON}"
    response = _error(415, "content-type", reason)
    response["Accept-Post"] = guard.JSON
    return response


def _too_many_failures(client: str, retry_after_s: int) -> JsonResponse:
    reason = f"too many failed token checks from {client}; retry in {retry_after_s} s"
    response = _error(429, "authorization", reason)
    response["Retry-After"] = str(retry_after_s)
    return response


def _refused_before_body(request: HttpRequest) -> JsonResponse | None:
    """415 for a body that is not JSON, 429 for a client that keeps failing token checks."""
    if not guard.is_json_content_type(request.META):
        return _unsupported_media_type()
    return _held_back(request)


def _held_back(request: HttpRequest) -> JsonResponse | None:
    client = guard.client_address(request.META)
    wait = guard.auth_failures.retry_after_s(client, guard.clock())
    return _too_many_failures(client, wait) if wait else None


def _note_auth_failure(request: HttpRequest, token: object) -> None:
    """Count a wrong token against its client (no token at all is not a guess)."""
    if token:
        guard.auth_failures.note(guard.client_address(request.META), guard.clock())


def _retry_later(reason: str) -> JsonResponse:
    response = _error(503, "$", reason)
    response["Retry-After"] = "1"
    return response


def _logged(request: HttpRequest, transport: str, source: object, response: HttpResponse) -> None:
    """Log a refusal (any 4xx) with the client and the source attempted."""
    if 400 <= response.status_code < 500:
        try:
            error = orjson.loads(response.content)["error"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            error = {"field": "$", "reason": "?"}
        client = client_from_meta(request.META)
        log_rejection(
            transport, client, source, response.status_code, error["field"], error["reason"]
        )


def _attempted_source(body: bytes) -> object:
    """The `source` a refused body claims, for the log (None when it cannot be read)."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return obj.get("source") if isinstance(obj, dict) else None


@csrf_exempt
def enroll(request: HttpRequest) -> HttpResponse:
    response = _enroll(request)
    if response.status_code >= 400:
        source = _attempted_source(request.body) if request.method == "POST" else None
        _logged(request, "enrolment", source, response)
    return response


def _enroll(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _method_not_allowed("POST")
    refused = _refused_before_body(request)
    if refused is not None:
        return refused
    try:
        body = orjson.loads(request.body)
    except orjson.JSONDecodeError:
        return _error(400, "$", "body must be JSON")
    fields = _enrol_fields(body)
    if isinstance(fields, JsonResponse):
        return fields
    token, source = fields
    try:
        enrolled = enroll_source(token if isinstance(token, str) else None, source)
    except EnrollmentError as exc:
        if exc.status == 401:
            _note_auth_failure(request, token)
        return _error(exc.status, "enroll_token" if exc.status == 401 else "source", exc.reason)
    except DatabaseError:
        return _retry_later("the database is unavailable; retry")
    return JsonResponse({"source": enrolled.source, "token": enrolled.token}, status=201)


@csrf_exempt  # token-authenticated, never by cookie: a POST gets the JSON 405
def inventory(request: HttpRequest) -> HttpResponse:
    """The site's inventory, for a site enrolment token or a `site:` source token (a
    facility agent checks its targets' entities against it before it polls)."""
    response = _inventory(request)
    if response.status_code >= 400:
        _logged(request, "inventory", None, response)
    return response


def _inventory(request: HttpRequest) -> HttpResponse:
    if request.method not in ("GET", "HEAD"):
        return _method_not_allowed("GET, HEAD")
    held = _held_back(request)
    if held is not None:
        return held
    token = bearer_from_meta(request.META)
    identity = authenticate_source(token)
    if identity is not None and identity.kind == "site":
        return JsonResponse(inventory_for_site(Site.objects.get(pk=identity.site_id)))
    try:
        site = site_for_enrollment_token(token)
    except EnrollmentError as exc:
        if exc.status == 401:
            _note_auth_failure(request, token)
        return _error(exc.status, "authorization", exc.reason)
    return JsonResponse(inventory_for_site(site))


class _OneShot:
    """A LinkHandler for one HTTP request."""

    def __init__(self) -> None:
        self.done: asyncio.Future[tuple[int | None, int, dict[str, Any] | None]] = (
            asyncio.get_running_loop().create_future()
        )

    def answer(self, seq: int | None, code: int, error: dict[str, Any] | None) -> None:
        if not self.done.done():
            self.done.set_result((seq, code, error))

    def link_lost(self) -> None:
        error = {"code": 503, "field": "$", "reason": "the ingest child restarted; resend"}
        if not self.done.done():
            self.done.set_result((None, 503, error))


async def submit_over_http(identity: SourceIdentity, body: bytes) -> JsonResponse:
    pool = get_pool()
    conn_id = pool.next_conn_id()
    try:
        link = await pool.link_for(conn_id)
    except Exception:
        return _retry_later("the ingest child is not available; resend")
    handler = _OneShot()
    link.open(conn_id, identity, handler)
    try:
        if link.submit(conn_id, body):
            await link.drain()
        seq, code, error = await asyncio.wait_for(handler.done, HTTP_WAIT_S)
    except TimeoutError:
        return _retry_later("the ingest child did not answer in time; resend")
    finally:
        link.close(conn_id)
    if code == 0:
        ack: dict[str, Any] = {"ack": seq, "t": round(time.time(), 3)}
        if error is not None:  # a part not stored (docs/protocol.md), counted by the writer
            ack["refused"] = error
        return JsonResponse(ack)
    response = JsonResponse({"nack": seq, "error": error}, status=code)
    if code == 503:
        response["Retry-After"] = "1"
    return response


@csrf_exempt
async def ingest(request: HttpRequest) -> HttpResponse:
    response, known = await _ingest(request)
    if response.status_code >= 400:
        source: object = known
        if source is None and request.method == "POST":
            declared = request.META.get("CONTENT_LENGTH") or "0"
            if declared.isdigit() and int(declared) <= MAX_BATCH_BYTES:
                source = _attempted_source(request.body)
        _logged(request, "HTTP ingest", source, response)
    return response


async def _ingest(request: HttpRequest) -> tuple[HttpResponse, str | None]:
    """The answer, and the token's source when the token was good."""
    if request.method != "POST":
        return _method_not_allowed("POST"), None
    refused = _refused_before_body(request)
    if refused is not None:
        return refused, None
    token = bearer_from_meta(request.META)
    try:
        identity = await database_sync_to_async(authenticate_source)(token)
    except DatabaseError:
        return _retry_later("the database is unavailable; resend"), None
    if identity is None:
        _note_auth_failure(request, token)
        return _error(401, "authorization", "unknown or revoked source token"), None
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if not declared.isdigit() or int(declared) > MAX_BATCH_BYTES:
        return _error(413, "$", "batch larger than 1 MiB"), identity.source
    body = request.body
    if len(body) > MAX_BATCH_BYTES:
        return _error(413, "$", "batch larger than 1 MiB"), identity.source
    return await submit_over_http(identity, body), identity.source
