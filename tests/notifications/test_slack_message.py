"""The Block Kit message for a notice (a pure function), Slack's answers classified,
and the redacted form of a webhook URL."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from fleet.notifications.notice import Member, Notice, Where
from fleet.notifications.slack import (
    MAX_BLOCKS,
    MAX_TEXT,
    Outcome,
    SendResult,
    build_message,
    classify,
    format_duration,
    redact_url,
)

SINCE = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
HOT = Notice(
    kind="firing",
    severity="critical",
    title="GPU temperature above limit",
    where=Where(site="lon1", hall="A", rack="B02", node="n17", gpu="3"),
    since=SINCE,
    value=92.4,
    threshold=85,
    unit="°C",
    cause="CDU-1 pump failed: loop flow 0 l/min",
    runbook_url="https://wiki.example/runbooks/gpu-hot",
    dashboard_url="https://fleet.example/racks/B02",
)


def texts(block: dict[str, object]) -> list[str]:
    """Every text string inside a block (section text, fields, context elements)."""
    found: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("text"), str):
                found.append(value["text"])
            for child in value.values():
                walk(child)
        elif isinstance(value, list):
            for child in value:
                walk(child)

    walk(block)
    return found


def everything(message: dict[str, object]) -> str:
    """All the text a reader could see, fallback included."""
    return "\n".join([str(message["text"]), *texts({"blocks": message["blocks"]})])


def test_a_firing_notice_says_severity_where_since_value_threshold_cause_and_links() -> None:
    message = build_message(HOT)
    text = everything(message)
    assert message["blocks"][0]["type"] == "header"
    assert "CRITICAL: GPU temperature above limit" in message["blocks"][0]["text"]["text"]
    assert "site lon1 / hall A / rack B02 / node n17 / GPU 3" in text
    assert f"<!date^{int(SINCE.timestamp())}^" in text and "2026-05-01 12:00 UTC" in text
    assert "92.4 °C (threshold 85 °C)" in text
    assert "CDU-1 pump failed" in text
    buttons = next(b for b in message["blocks"] if b["type"] == "actions")["elements"]
    assert [(b["text"]["text"], b["url"]) for b in buttons] == [
        ("Runbook", HOT.runbook_url),
        ("Dashboard", HOT.dashboard_url),
    ]
    assert message["text"].startswith("CRITICAL: GPU temperature above limit")


def test_a_resolved_notice_states_how_long_it_lasted() -> None:
    resolved = Notice(
        kind="resolved",
        severity="critical",
        title="GPU temperature above limit",
        where=HOT.where,
        since=SINCE,
        duration=timedelta(hours=1, minutes=12, seconds=5),
    )
    message = build_message(resolved)
    assert "Resolved: GPU temperature above limit" in message["blocks"][0]["text"]["text"]
    assert "*Lasted*\n1 h 12 min" in everything(message)
    assert "lasted 1 h 12 min" in message["text"]


def test_a_120_member_group_stays_within_slack_limits_and_says_and_n_more() -> None:
    members = tuple(
        Member(
            where=Where(rack=f"R{i:03d}", node=f"node-{i:03d}-" + "x" * 300, gpu=str(i % 8)),
            value=80 + i / 10,
            since=SINCE,
            cause="fan " * 100,
        )
        for i in range(120)
    )
    message = build_message(
        Notice(kind="firing", severity="warning", title="GPUs hot", members=members)
    )
    blocks = message["blocks"]
    assert len(blocks) <= MAX_BLOCKS
    assert all(len(t) <= MAX_TEXT for b in blocks for t in texts(b))
    # Slack's undocumented whole-message limit (msg_blocks_too_long) is about 13k characters
    assert len(json.dumps(blocks, ensure_ascii=False)) < 12_000
    text = everything(message)
    assert "and 100 more" in text
    assert "*Affected*\n120" in text


def test_names_cannot_inject_slack_markup() -> None:
    notice = Notice(kind="firing", severity="info", title="x", where=Where(node="<!channel> & <b>"))
    text = everything(build_message(notice))
    assert "<!channel>" not in text
    assert "&lt;!channel&gt; &amp; &lt;b&gt;" in text


def test_a_test_message_says_the_route_works() -> None:
    message = build_message(Notice(kind="test", severity="info", title="route “ops”"))
    assert "Test: route “ops”" in message["blocks"][0]["text"]["text"]
    assert "this route works" in everything(message)


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(45, "45 s"), (720, "12 min"), (3600, "1 h"), (4325, "1 h 12 min"), (183600, "2 d 3 h")],
)
def test_durations_read_as_an_operator_says_them(seconds: int, said: str) -> None:
    assert format_duration(timedelta(seconds=seconds)) == said


@pytest.mark.parametrize(
    ("status", "body", "outcome"),
    [
        (200, "ok", Outcome.DELIVERED),
        (429, "rate_limited", Outcome.RATE_LIMITED),
        (500, "rollup_error", Outcome.TRANSIENT),
        (503, "", Outcome.TRANSIENT),
        (None, "timed out", Outcome.TRANSIENT),
        (404, "channel_not_found", Outcome.PERMANENT),
        (410, "channel_is_archived", Outcome.PERMANENT),
        (403, "action_prohibited", Outcome.PERMANENT),
        (400, "invalid_blocks", Outcome.PERMANENT),
        (400, "no_text", Outcome.PERMANENT),
        (404, "no_service", Outcome.PERMANENT),
        (403, "invalid_token", Outcome.PERMANENT),
    ],
)
def test_slack_answers_are_classified(status: int | None, body: str, outcome: Outcome) -> None:
    assert classify(SendResult(status, body, None, 0.1)) is outcome


def test_a_redacted_webhook_url_shows_only_host_and_last_four_characters() -> None:
    url = "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXabcd"
    shown = redact_url(url)
    assert shown == "hooks.slack.com …abcd"
    assert "T000" not in shown and "XXXX" not in shown


def test_a_members_reading_carries_its_unit_and_a_flag_shows_no_bare_number() -> None:
    members = (
        Member(where=Where(node="gpu-a01-01", gpu="2"), value=2.0, since=SINCE, unit="°C"),
        Member(where=Where(node="gpu-a01-01", gpu="3"), since=SINCE, cause="Fatal XID"),
    )
    message = build_message(
        Notice(kind="firing", severity="critical", title="GPUs", members=members)
    )
    body = everything(message)
    assert "GPU 2: 2 °C since" in body
    assert "GPU 3 since" in body and "(Fatal XID)" in body
