"""When each GPU process started, read from a recorded `/proc` tree (tests/data/proc/started/)
and sent in the `workloads` part, so that the server can open its interval at that start."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from agents.attribution.cgroups import ProcReader
from agents.attribution.starts import start_ticks
from agents.collectors.workloads import WorkloadCollector
from agents.nvml.wrapper import Nvml
from agents.outbox import build_batch
from agents.protocol.validate import ProtocolError, validate_batch
from fleetsim.fake_nvml import FakeNvml
from fleetsim.nvml_answers import FakeProcess
from tests.support.nvml_scenarios import fake_gpus

PROC = Path(__file__).resolve().parents[1] / "data" / "proc"
PID = 4113
BOOT = 1_796_470_000  # the tree's /proc/stat `btime`
STARTED = BOOT + 86_400.12  # its `stat` field 22: 8,640,012 ticks of 1/100 s after boot


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    shutil.copytree(PROC / "started", tmp_path, dirs_exist_ok=True)
    return tmp_path


def _read(collector: WorkloadCollector, now: float) -> list[dict[str, Any]]:
    return [p for e in collector.read(now).workloads for p in e["processes"]]


def _collector(fake: FakeNvml, proc: Path) -> WorkloadCollector:
    collector = WorkloadCollector(Nvml(fake), ProcReader(proc), node="gpu01")
    collector.setup()
    return collector


def test_a_process_started_at_boot_time_plus_its_start_ticks() -> None:
    assert ProcReader(PROC / "started").started(PID) == pytest.approx(STARTED, abs=0.005)


def test_a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() -> None:
    line = f"{PID} (vllm (worker) 2) S 1 {PID} {PID} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 777 0"
    assert start_ticks(line) == 777


def test_a_gone_process_or_a_tree_without_stat_files_has_no_start() -> None:
    assert ProcReader(PROC / "started").started(999_999) is None
    assert ProcReader(PROC / "user").started(4112) is None  # a recorded tree with no `stat`


def test_the_collector_sends_each_processs_start_and_the_batch_is_valid(proc: Path) -> None:
    fake = fake_gpus(1, processes={0: [FakeProcess(PID, 4096, sm_pct=80)]})
    collector = _collector(fake, proc)
    now = STARTED + 30.0
    reading = collector.read(now)
    (process,) = reading.workloads[0]["processes"]
    assert process["started"] == pytest.approx(STARTED, abs=0.005)
    validate_batch(build_batch("node:gpu01", 1, reading, {}), now)


def test_a_pid_that_leaves_and_comes_back_is_read_again(proc: Path) -> None:
    fake = fake_gpus(1, processes={0: [FakeProcess(PID, 4096, sm_pct=80)]})
    collector = _collector(fake, proc)
    assert _read(collector, STARTED + 10)[0]["started"] == pytest.approx(STARTED, abs=0.005)
    fake.processes = {0: []}
    assert _read(collector, STARTED + 20) == []
    # The PID reused by a process that started 500 ticks (5 s) later.
    stat = (proc / str(PID) / "stat").read_text().replace(" 8640012 ", " 8640512 ")
    (proc / str(PID) / "stat").write_text(stat)
    fake.processes = {0: [FakeProcess(PID, 4096, sm_pct=80)]}
    again = _read(collector, STARTED + 30)[0]["started"]
    assert again == pytest.approx(STARTED + 5.0, abs=0.005)


def test_a_start_later_than_the_snapshot_is_left_out(proc: Path) -> None:
    # A clock stepped back after boot: the start would be in the snapshot's future.
    fake = fake_gpus(1, processes={0: [FakeProcess(PID, 4096, sm_pct=80)]})
    (process,) = _read(_collector(fake, proc), STARTED - 60.0)
    assert "started" not in process


@pytest.mark.parametrize(
    ("started", "why"),
    [("yesterday", "must be a number"), (-1.0, "outside"), (2e9, "outside")],
)
def test_a_start_that_is_not_a_time_before_the_snapshot_is_refused_naming_it(
    started: Any, why: str
) -> None:
    ts = 1_796_556_430.0
    process = {"pid": PID, "sm_pct": 1.0, "started": started, "owner": {"kind": "user", "uid": 0}}
    batch = {
        "protocol": 1,
        "source": "node:gpu01",
        "seq": 1,
        "workloads": [{"ts": ts, "gpu": 0, "allocation": None, "processes": [process]}],
    }
    with pytest.raises(ProtocolError) as refused:
        validate_batch(batch, now=ts)
    assert refused.value.field == "workloads[0].processes[0].started"
    assert why in str(refused.value)
