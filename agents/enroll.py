"""Enrolment: trade a site's enrolment token for this source's own token, and keep it safe.

`POST /api/v1/enroll {"enroll_token", "source"}` → `201 {"source", "token"}`. The token is
written with mode 0600 (it is the node's only credential) by creating the file with that
mode, never by chmod after the fact, so it is never readable by others even for a moment.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from agents.protocol import HTTP_ENROLL_PATH
from agents.uplink import http_url


class EnrollError(Exception):
    """Enrolment failed; the message says why in words an operator can act on."""


def enroll(server: str, enroll_token: str, source: str, timeout_s: float = 10.0) -> str:
    """Return the new source token, or raise EnrollError."""
    body = json.dumps({"enroll_token": enroll_token, "source": source}).encode()
    request = urllib.request.Request(
        http_url(server, HTTP_ENROLL_PATH),
        data=body,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            answer: Any = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise EnrollError(
            _explain(exc.code, exc.read(2048).decode(errors="replace"), source)
        ) from None
    except (OSError, ValueError) as exc:
        raise EnrollError(f"cannot reach {server} to enrol: {exc}") from None
    token = answer.get("token") if isinstance(answer, dict) else None
    if not isinstance(token, str) or not token:
        raise EnrollError(f"the server answered without a token: {str(answer)[:200]}")
    return token


def _explain(status: int, body: str, source: str) -> str:
    detail = _error_text(body)
    if status == 401:
        return (
            "the enrolment token was refused (bad, expired or revoked): "
            f"ask for a new one in the admin or from `make demo`{detail}"
        )
    if status == 404:
        return f"{source} is not in the site's inventory: add it first{detail}"
    return f"enrolment failed with HTTP {status}{detail}"


def _error_text(body: str) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return f" ({body[:200]})" if body.strip() else ""
    if isinstance(data, dict):
        error = data.get("error", data.get("detail"))
        if isinstance(error, dict):
            error = error.get("reason") or error
        if error:
            return f" ({error})"
    return ""


def write_token(path: Path, token: str) -> None:
    """Atomically write the token with mode 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # O_CREAT's mode is masked by umask; an existing file keeps its own
        os.write(fd, (token + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_token(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except FileNotFoundError:
        raise EnrollError(f"no token at {path}: run `fleet-agent enroll` first") from None
    if not token:
        raise EnrollError(f"{path} is empty: run `fleet-agent enroll` again")
    return token
