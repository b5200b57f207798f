"""Enrolled sources as the ingest keeps them, for tests that judge an agent's cadence or
silence without running one."""

from __future__ import annotations

from typing import Any

from fleet.models import Site, SourceToken, hash_token


def source_token(
    source: str, kind: str, site: Site, last_seen: float | None, **fields: Any
) -> SourceToken:
    """`source`'s token (hashed from its name), last seen at `last_seen`; `fields` as
    SourceToken has them (its declared intervals, agent stats)."""
    return SourceToken.objects.create(
        source=source,
        kind=kind,
        site=site,
        token_hash=hash_token(source),
        last_seen=last_seen,
        **fields,
    )
