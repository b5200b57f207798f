"""Who is sending: bearer tokens → the source they may write."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fleet.models import SourceToken, hash_token


@dataclass(frozen=True, slots=True)
class SourceIdentity:
    source: str
    kind: str
    site_id: int
    token_hash: str


def bearer_from_headers(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def bearer_from_meta(meta: dict[str, object]) -> str | None:
    raw = meta.get("HTTP_AUTHORIZATION")
    if not isinstance(raw, str):
        return None
    scheme, _, token = raw.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def authenticate_source(token: str | None) -> SourceIdentity | None:
    """The source this token writes, or None for an unknown or revoked token."""
    if not token:
        return None
    token_hash = hash_token(token)
    found = (
        SourceToken.objects.filter(token_hash=token_hash, revoked=False)
        .values_list("source", "kind", "site_id")
        .first()
    )
    if found is None:
        return None
    return SourceIdentity(*found, token_hash)
