"""Slack: the Block Kit message for a `Notice` (pure), the webhook transport, and how
Slack's answers are classified. Limits and error codes: Slack's rate limits
(https://api.slack.com/docs/rate-limits) and incoming-webhook errors
(https://api.slack.com/changelog/2016-05-17-changes-to-errors-for-incoming-webhooks).

The webhook URL is a secret: it is never logged (slack_sdk's own logger, which
prints it at DEBUG, is given a silent logger) and only ever shown redacted.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)
from slack_sdk.webhook import WebhookClient

from fleet.notifications.notice import Member, Notice

__all__ = (
    "MAX_BLOCKS",
    "MAX_TEXT",
    "Outcome",
    "SendResult",
    "SlackWebhook",
    "build_message",
    "classify",
    "format_duration",
    "redact_url",
)

# Slack's limits (slack_sdk models/blocks/blocks.py; api.slack.com/reference/block-kit).
MAX_BLOCKS = 50
MAX_TEXT = 3000  # a section's text
MAX_HEADER = 150
# A big group lists this many members, then "and N more": Slack also rejects a message
# whose blocks total about 13k characters (msg_blocks_too_long), so 50 blocks of
# 3,000 characters would still be refused. 20 lines of at most 200 stay near 4k.
MAX_MEMBERS_SHOWN = 20
MAX_LINE = 200

ICON = {
    "critical": ":red_circle:",
    "warning": ":large_orange_circle:",
    "info": ":large_blue_circle:",
}


# ---------------------------------------------------------------------------
# the message


def build_message(notice: Notice) -> dict[str, Any]:
    """The webhook body: fallback `text` (notifications, screen readers) and `blocks`."""
    blocks: list[Block] = [_header(notice), SectionBlock(fields=_fields(notice))]
    if notice.cause:
        blocks.append(_section(f"*Cause:* {_escape(notice.cause)}"))
    if notice.summary:
        blocks.append(_section(f"*Summary:* {_escape(notice.summary)}"))
    blocks.extend(_member_blocks(notice.members))
    buttons = _buttons(notice)
    if buttons:
        blocks.append(ActionsBlock(elements=buttons))
    blocks.append(ContextBlock(elements=[MarkdownTextObject(text=_footer(notice))]))
    # to_dict() checks each block's own limits (raises SlackObjectFormationError)
    return {"text": _fallback(notice), "blocks": [b.to_dict() for b in blocks[:MAX_BLOCKS]]}


def _headline(notice: Notice) -> str:
    if notice.kind == "resolved":
        return f"Resolved: {notice.title}"
    if notice.kind in ("recovered", "report"):  # the title says it: "CDU-1 recovered …"
        return notice.title
    if notice.kind == "test":
        return f"Test: {notice.title}"
    if notice.kind == "update":
        return f"{notice.severity.upper()} update: {notice.title}"
    if notice.kind == "repeat":
        return f"{notice.severity.upper()} still firing: {notice.title}"
    return f"{notice.severity.upper()}: {notice.title}"


def _header(notice: Notice) -> HeaderBlock:
    icon = {
        "resolved": ":white_check_mark:",
        "recovered": ":large_green_circle:",
        "test": ":test_tube:",
        "report": ":bar_chart:",
    }.get(notice.kind, ICON[notice.severity])
    return HeaderBlock(text=PlainTextObject(text=_cut(f"{icon} {_headline(notice)}", MAX_HEADER)))


def _fields(notice: Notice) -> list[MarkdownTextObject]:
    pairs = [("Severity", notice.severity), ("Where", _escape(notice.where.label()))]
    if notice.since is not None:
        label = "Fired" if notice.kind in ("resolved", "recovered") else "Since"
        pairs.append((label, slack_time(notice.since)))
    if notice.duration is not None:
        pairs.append(("Lasted", format_duration(notice.duration)))
    if notice.value is not None:
        pairs.append(("Value", _value_text(notice)))
    if notice.members:
        pairs.append(("Affected", str(len(notice.members))))
    return [MarkdownTextObject(text=f"*{name}*\n{text}") for name, text in pairs[:10]]


def _value_text(notice: Notice) -> str:
    text = f"{_num(notice.value)} {notice.unit}".strip()
    if notice.threshold is not None:
        text += f" (threshold {_num(notice.threshold)} {notice.unit})".replace(" )", ")")
    return _escape(text)


def _member_blocks(members: tuple[Member, ...]) -> list[Block]:
    """Up to MAX_MEMBERS_SHOWN lines packed into sections of ≤ 3,000 characters."""
    if not members:
        return []
    blocks: list[Block] = []
    chunk = ""
    for member in members[:MAX_MEMBERS_SHOWN]:
        line = _cut(_member_line(member), MAX_LINE)
        if chunk and len(chunk) + 1 + len(line) > MAX_TEXT:
            blocks.append(_section(chunk))
            chunk = ""
        chunk = f"{chunk}\n{line}" if chunk else line
    blocks.append(_section(chunk))
    hidden = len(members) - MAX_MEMBERS_SHOWN
    if hidden > 0:
        more = f"…and {hidden} more (see the dashboard)"
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=more)]))
    return blocks


def _member_line(member: Member) -> str:
    line = f"• {_escape(member.where.label())}"
    if member.value is not None:
        line += f": {_num(member.value)} {member.unit}".rstrip()
    if member.since is not None:
        line += f" since {slack_time(member.since)}"
    if member.cause:
        line += f" ({_escape(member.cause)})"
    return line


def _buttons(notice: Notice) -> list[ButtonElement]:
    # Webhook messages can only carry link buttons (no interactivity without an app).
    # Only absolute http(s) links: Slack refuses a relative URL (the whole message, 400).
    page = "Download" if notice.kind == "report" else "Dashboard"  # the report's CSV
    links = (("Runbook", notice.runbook_url), (page, notice.dashboard_url))
    return [
        ButtonElement(text=label, url=url)
        for label, url in links
        if url.startswith(("https://", "http://"))
    ]


def _footer(notice: Notice) -> str:
    if notice.kind == "test":
        return "Fleetwatch test message: this route works."
    return "Fleetwatch"


def _fallback(notice: Notice) -> str:
    text = _escape(f"{_headline(notice)} ({notice.where.label()})")
    if notice.duration is not None and notice.kind != "recovered":  # its title says it
        text += f", lasted {format_duration(notice.duration)}"
    return _cut(text, MAX_TEXT)


def _section(text: str) -> SectionBlock:
    return SectionBlock(text=MarkdownTextObject(text=_cut(text, MAX_TEXT)))


def slack_time(when: datetime) -> str:
    """Shown in each reader's own time zone by Slack; the fallback is UTC."""
    fallback = when.strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{int(when.timestamp())}^{{date_short_pretty}} {{time}}|{fallback}>"


def format_duration(duration: timedelta) -> str:
    """'45 s', '12 min', '1 h 12 min', '2 d 3 h': as precise as anyone reads it."""
    seconds = int(duration.total_seconds())
    if seconds < 60:
        return f"{seconds} s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if hours == 0:
        return f"{minutes} min"
    if days == 0:
        rest = minutes % 60
        return f"{hours} h {rest} min" if rest else f"{hours} h"
    rest = hours % 24
    return f"{days} d {rest} h" if rest else f"{days} d"


def _num(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:,.1f}".removesuffix(".0")


def _escape(text: str) -> str:
    # Slack mrkdwn's only reserved characters; a node called <b> must not become markup.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------------------
# sending and what Slack's answer means


class Outcome(StrEnum):
    DELIVERED = "delivered"
    RATE_LIMITED = "rate_limited"  # wait Retry-After, then try again
    TRANSIENT = "transient"  # 5xx or no answer: back off and try again, a bounded number of times
    PERMANENT = "permanent"  # the route is broken (channel gone, bad token, bad payload)


@dataclass(frozen=True)
class SendResult:
    status: int | None  # None: no HTTP answer (refused, timed out, DNS)
    body: str  # Slack's answer ("ok", "channel_not_found") or the network error
    retry_after: float | None
    duration_s: float

    @property
    def reason(self) -> str:
        """As the admin shows it: '404 channel_not_found', 'no answer: timed out'."""
        return f"{self.status} {self.body}".strip() if self.status else f"no answer: {self.body}"


def classify(result: SendResult) -> Outcome:
    """Slack's answers, as its webhook error list and rate limits (module docstring) define
    them; docs/notifications.md has the table."""
    if result.status is None or result.status >= 500:
        return Outcome.TRANSIENT
    if result.status == 429:
        return Outcome.RATE_LIMITED
    if 200 <= result.status < 300:
        return Outcome.DELIVERED
    return Outcome.PERMANENT


def _silent_logger() -> logging.Logger:
    """slack_sdk logs the full URL (DEBUG, and on errors). Give it a logger outside the
    logging tree: no parent to propagate to, whatever the logging config says."""
    silent = logging.Logger("fleet.notifications.slack_sdk", level=logging.CRITICAL + 1)
    silent.addHandler(logging.NullHandler())  # not even logging's last-resort stderr handler
    return silent


_SILENT = _silent_logger()


class SlackWebhook:
    """The Slack incoming-webhook transport: one POST, no retries of its own (the
    delivery task decides, so a worker never sleeps on a Retry-After)."""

    timeout_s = 10.0

    def send(self, url: str, message: dict[str, Any]) -> SendResult:
        client = WebhookClient(url, timeout=int(self.timeout_s), logger=_SILENT)
        client.retry_handlers = []  # not even the default connection retry: ours is deferred
        started = time.monotonic()
        try:
            response = client.send_dict(message)
        except Exception as exc:  # urllib raises for no answer; slack_sdk for a bad URL
            error = str(exc).replace(url, redact_url(url))[:200] or type(exc).__name__
            return SendResult(None, error, None, time.monotonic() - started)
        return SendResult(
            response.status_code,
            (response.body or "").strip()[:200],
            _retry_after(response.headers),
            time.monotonic() - started,
        )


def _retry_after(headers: Any) -> float | None:
    raw = None
    if headers is not None:
        raw = headers.get("Retry-After") or headers.get("retry-after")
    if isinstance(raw, list):  # slack_sdk keeps some headers as lists
        raw = raw[0] if raw else None
    try:
        return max(1.0, float(raw)) if raw is not None else None
    except ValueError:
        return None


def redact_url(url: str) -> str:
    """'hooks.slack.com …Xy12': enough to tell routes apart, useless to an onlooker."""
    if not url:
        return ""
    host = urlsplit(url).hostname or "?"
    return f"{host} …{url[-4:]}"
