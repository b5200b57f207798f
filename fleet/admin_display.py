"""How the admin screens show a time and a JSON document (shared by every admin module)."""

from __future__ import annotations

import datetime as dt
import json

from django.utils.html import format_html


def epoch_text(ts: float | None) -> str:
    """Epoch seconds as UTC, for reading at a glance; "never" for no time."""
    if ts is None:
        return "never"
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def pretty_json(value: object) -> str:
    """A JSON document indented, keys sorted, escaped inside <pre>."""
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True))
