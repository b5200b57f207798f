"""A Slurm job's user, account and GPUs, from scontrol's one-line output (no process run)."""

from __future__ import annotations

import subprocess
from typing import Any

from agents.attribution.slurm import (
    Scontrol,
    expand_hostlist,
    gres_indexes,
    parse_show_job,
)

SHOW_JOB = (
    "JobId=4242 JobName=train UserId=alice(61001) GroupId=alice(61001) MCS_label=N/A "
    "Priority=4294901 Nice=0 Account=physics QOS=normal JobState=RUNNING Reason=None "
    "NodeList=gpu[01-02] BatchHost=gpu01 NumNodes=2 TRES=cpu=64,mem=512G,node=2,gres/gpu=6 "
    "Nodes=gpu01 CPU_IDs=0-31 Mem=262144 GRES=gpu:h100:4(IDX:0-1,3,5) "
    "Nodes=gpu02 CPU_IDs=0-31 Mem=262144 GRES=gpu:h100:2(IDX:6-7) "
    "Command=/home/alice/run.sh WorkDir=/home/alice"
)


def test_a_jobs_user_account_and_gpus_per_node_are_read_from_one_line() -> None:
    info = parse_show_job(SHOW_JOB)
    assert info is not None
    assert (info.job, info.user, info.uid, info.account) == ("4242", "alice", 61001, "physics")
    assert info.gres_on("gpu01") == (0, 1, 3, 5)
    assert info.gres_on("gpu02") == (6, 7)
    assert info.gres_on("gpu03") == ()


def test_gres_lists_only_gpus_and_no_index_for_na() -> None:
    assert gres_indexes("gpu:a100:1(IDX:2),shard:4(IDX:0-1)") == (2,)
    assert gres_indexes("gpu:2(IDX:N/A)") == ()
    assert gres_indexes("gpu:h200:8(IDX:0-7)") == tuple(range(8))


def test_hostlists_expand_with_their_zero_padding() -> None:
    assert expand_hostlist("gpu[01-03,07],login1") == {"gpu01", "gpu02", "gpu03", "gpu07", "login1"}


def test_a_line_without_a_job_is_no_job() -> None:
    assert parse_show_job("slurm_load_jobs error: Invalid job id specified") is None


class _Scontrol:
    """Stands in for subprocess.run: answers one canned line, counts the calls."""

    def __init__(self, stdout: str = SHOW_JOB, returncode: int = 0, raises: Any = None) -> None:
        self.stdout, self.returncode, self.raises = stdout, returncode, raises
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        if self.raises is not None:
            raise self.raises
        return subprocess.CompletedProcess(argv, self.returncode, self.stdout, "")


def test_scontrol_is_asked_once_per_job_with_a_timeout() -> None:
    run = _Scontrol()
    scontrol = Scontrol("scontrol", timeout_s=1.5, run=run)
    first, again = scontrol.job("4242"), scontrol.job("4242")
    assert first is not None and first is again
    assert run.calls == [["scontrol", "-d", "-o", "show", "job", "4242"]]


def test_no_scontrol_on_the_node_is_unsupported_and_not_looked_for_again() -> None:
    run = _Scontrol(raises=FileNotFoundError("scontrol"))
    scontrol = Scontrol("scontrol", run=run)
    assert scontrol.job("1") is None and scontrol.job("2") is None
    assert not scontrol.supported and len(run.calls) == 1


def test_a_scontrol_that_times_out_is_asked_again_next_time() -> None:
    run = _Scontrol(raises=subprocess.TimeoutExpired("scontrol", 2.0))
    scontrol = Scontrol("scontrol", run=run)
    assert scontrol.job("1") is None and scontrol.job("1") is None
    assert scontrol.supported and len(run.calls) == 2


def test_a_finished_job_is_remembered_as_unknown() -> None:
    run = _Scontrol(stdout="", returncode=1)
    scontrol = Scontrol("scontrol", run=run)
    assert scontrol.job("9") is None and scontrol.job("9") is None
    assert len(run.calls) == 1


def test_an_empty_command_turns_scontrol_off() -> None:
    assert not Scontrol("").supported
