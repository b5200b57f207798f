"""The server side of ingest: starting its child process."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from fleet.ingest.link import ChildStartFailed, IngestLink


class HangingLink(IngestLink):
    child_module = "tests.support.hanging_child"
    start_timeout_s = 1.0


@pytest.mark.process  # the ingest link spawns its child process
def test_a_child_that_never_starts_times_out_and_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid_file = tmp_path / "child.pid"
    monkeypatch.setenv("HANGING_CHILD_PID_FILE", str(pid_file))
    link = HangingLink({"db": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}})
    started = time.monotonic()
    with pytest.raises(ChildStartFailed):
        asyncio.run(link.ensure_started())
    assert time.monotonic() - started < 10
    assert not link.running and link.proc is None
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped: no orphan, no zombie
