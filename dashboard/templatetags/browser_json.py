"""`{{ value|browser_json:"element-id" }}` (dashboard/browser_json.py, in place of Django's
`json_script`) and `{% dedent %}…{% enddedent %}`, which drops the indentation of the lines
it encloses: the fleet page repeats its rack tile 500 times at 10,000 GPUs, and the
template's indentation was ~60 KB of the page. A browser collapses a newline and the spaces
after it into one space, so the page renders the same; not for `<pre>` or `<textarea>`."""

from __future__ import annotations

import re
from typing import Any

from django import template
from django.template.base import NodeList, Parser, Token
from django.utils.safestring import SafeString, mark_safe

from dashboard import browser_json as encoder

register = template.Library()

_INDENT = re.compile(r"\n\s+")


@register.filter
def browser_json(value: Any, element_id: str) -> SafeString:
    return encoder.json_script(value, element_id)


class DedentNode(template.Node):
    def __init__(self, nodelist: NodeList) -> None:
        self.nodelist = nodelist

    def render(self, context: template.Context) -> SafeString:
        return mark_safe(_INDENT.sub("\n", self.nodelist.render(context)))


@register.tag
def dedent(parser: Parser, token: Token) -> DedentNode:
    nodelist = parser.parse(("enddedent",))
    parser.delete_first_token()
    return DedentNode(nodelist)
