"""Shared by the in-process alert tests: a local receiver that answers like Slack, set as
SLACK_WEBHOOK_URL (the default route) for the test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.slack_receiver import SlackReceiver


@pytest.fixture
def slack(settings: Any) -> Iterator[SlackReceiver]:
    with SlackReceiver() as receiver:
        settings.SLACK_WEBHOOK_URL = receiver.url("/alerts")
        yield receiver
