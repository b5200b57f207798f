"""`{% fleet_words_json %}`: the words and rules a live page's scripts say and judge by
(fleet/words.py `browser_words`), embedded once per page for static/dashboard/live.js."""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString

from dashboard.browser_json import json_script
from fleet.words import browser_words

register = template.Library()


@register.simple_tag
def fleet_words_json() -> SafeString:
    return json_script(browser_words(), "fleet-words")
