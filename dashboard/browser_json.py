"""JSON for the browser, one encoder for what pages embed and what live sockets push.

Compact (no spaces after `,` and `:`) and UTF-8 (`°`, `·` as themselves, not `\\u00b0`),
encoded by orjson: the fleet page at 10,000 GPUs embeds ~500 rack payloads, and Python's
`json.dumps` defaults (what Django's `json_script` and Channels' `send_json` use) spent
~55 KB of it on spaces and escapes, and every push is encoded once per watching socket.
What orjson does not know (lazy translations, `Decimal`, datetimes in Django's own format)
goes through Django's `DjangoJSONEncoder`, as `json_script` did. NaN or an infinity becomes
`null`, which `JSON.parse` takes (Python's `NaN` would fail the page's whole payload).
"""

from __future__ import annotations

from typing import Any

import orjson
from django.core.serializers.json import DjangoJSONEncoder
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

_DJANGO = DjangoJSONEncoder()
_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME
# What Django's json_script escapes, so no value can end the <script> element early.
_SCRIPT_ESCAPES = {ord(">"): "\\u003E", ord("<"): "\\u003C", ord("&"): "\\u0026"}


def to_json(value: Any) -> str:
    """`value` as compact UTF-8 JSON text."""
    return orjson.dumps(value, default=_DJANGO.default, option=_OPTIONS).decode()


def json_script(value: Any, element_id: str) -> SafeString:
    """Django's `json_script`, with `to_json`'s encoding: `value` in a
    `<script type="application/json">` element a page's script reads by its id."""
    text = to_json(value).translate(_SCRIPT_ESCAPES)
    return format_html(
        '<script id="{}" type="application/json">{}</script>', element_id, mark_safe(text)
    )
