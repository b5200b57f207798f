"""Remote write as a periodic task: `fleet.remote_write` on the maintenance queue, in the
beat's schedule only when a receiver is configured, and harmless when it is not."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.tasks import remote_write
from fleetwatch.celery import MAINTENANCE, TASK_QUEUES, app, schedule_remote_write
from fleetwatch.remote_write_settings import RemoteWrite


def test_the_beat_sends_passes_only_when_a_receiver_is_configured(settings: Any) -> None:
    app.conf.beat_schedule.pop("remote-write", None)
    settings.REMOTE_WRITE = RemoteWrite()
    schedule_remote_write(app)
    assert "remote-write" not in app.conf.beat_schedule

    settings.REMOTE_WRITE = RemoteWrite(url="http://tsdb:9090/api/v1/write", every_s=5.0)
    schedule_remote_write(app)

    entry = app.conf.beat_schedule.pop("remote-write")
    assert entry == {"task": "fleet.remote_write", "schedule": 5.0, "options": {"expires": 4.5}}
    assert TASK_QUEUES["fleet.remote_write"] == MAINTENANCE


@pytest.mark.django_db
def test_the_task_does_nothing_while_remote_write_is_off(settings: Any) -> None:
    settings.REMOTE_WRITE = RemoteWrite()

    assert remote_write.run() == {
        "shipped": {},
        "dropped": {},
        "requests": 0,
        "failed": None,
        "backing_off": False,
        "overlapped": False,
    }
