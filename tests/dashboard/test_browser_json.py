"""What pages embed and live sockets push (dashboard/browser_json.py) reads back as what
Django's own encoder gave, cannot end its <script> element early, and takes no space it
need not; `{% dedent %}` leaves the text a browser shows unchanged."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from decimal import Decimal

from django.core.serializers.json import DjangoJSONEncoder
from django.template import Context, Template
from django.utils.translation import gettext_lazy

from dashboard.browser_json import json_script, to_json

VALUE = {
    "racks": {7: {"power_kw": 37.0, "ts": 1796596872.3200183, "words": "8 °C to slowdown · ok"}},
    "when": dt.datetime(2026, 12, 6, 22, 30, 1, 123456, tzinfo=dt.UTC),
    "day": dt.date(2026, 12, 6),
    "price": Decimal("0.125"),
    "label": gettext_lazy("Fleet overview"),
    "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "levels": ["ok", None, True, 3],
}


def test_it_reads_back_as_what_djangos_encoder_gave() -> None:
    assert json.loads(to_json(VALUE)) == json.loads(json.dumps(VALUE, cls=DjangoJSONEncoder))


def test_it_is_compact_and_utf8() -> None:
    text = to_json(VALUE)
    assert len(text) < len(json.dumps(VALUE, cls=DjangoJSONEncoder)) * 0.9
    assert "°C to slowdown · ok" in text and "\\u00b0" not in text
    assert ", " not in text.replace("°C to slowdown · ok", "") and '": ' not in text


def test_a_value_cannot_end_the_script_element() -> None:
    hostile = {"name": "</script><script>alert(1)</script>", "and": "a & b <!--"}
    html = str(json_script(hostile, "fleet-data"))
    body = re.fullmatch(r'<script id="fleet-data" type="application/json">(.*)</script>', html)
    assert body is not None and "<" not in body.group(1) and "&" not in body.group(1)
    assert json.loads(body.group(1)) == hostile


def test_not_a_number_is_null_which_a_browser_parses() -> None:
    assert to_json({"inlet_c": float("nan"), "x": float("inf")}) == '{"inlet_c":null,"x":null}'


def test_dedent_drops_indentation_but_not_the_text_shown() -> None:
    source = """<ul>
      <li><span>37.0</span>
        <span>/ 40 kW</span></li>

      <li>{{ word }}</li>
    </ul>"""
    plain = Template(source).render(Context({"word": "<b>"}))
    dedented = Template("{% load browser_json %}{% dedent %}" + source + "{% enddedent %}").render(
        Context({"word": "<b>"})
    )
    assert len(dedented) < len(plain) and "\n " not in dedented
    assert re.sub(r"\s+", " ", dedented) == re.sub(r"\s+", " ", plain)  # what a browser shows
    assert "&lt;b&gt;" in dedented  # still escaped
