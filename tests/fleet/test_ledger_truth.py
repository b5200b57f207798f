"""The energy ledger on the simulator, where the truth is known (issue 21): 8 H200 nodes, one
per job shape (training pods and Slurm jobs, bursty inference, MIG pods, an allocation
running nothing, a hung collective, a SLUID node, a job using one of its eight GPUs), three
hours of simulated time through real agent outboxes into a real server (embedded tier),
rolled up, and the ledger over those minutes set beside what the simulated GPUs and
facility really used (fleetsim/truth.py; the run: tests/support/ledger_truth.py).

Two of issue 21's checks do not hold yet and are marked `xfail(strict=True)`, each with its
cause: when the ledger is fixed they pass and the marker must go.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.ledger_truth import (
    RACKS,
    SERVER_ENV,
    TOLERANCE_PCT,
    Comparison,
    JobCheck,
    compare,
    server_db,
    simulate,
)
from tests.support.server import FleetServer

KWH = 3.6e6  # J


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, django_db_blocker: Any) -> Iterator[Comparison]:
    workdir = tmp_path_factory.mktemp("ledger-truth")
    with FleetServer.started(workdir / "server", racks=RACKS, extra_env=SERVER_ENV) as server:
        sim = asyncio.run(simulate(server, workdir))
        with django_db_blocker.unblock(), server_db(server) as alias:
            yield compare(sim, alias)


def _off(checks: list[JobCheck], error: str) -> list[str]:
    return [
        f"{c.jobs[0]}{' +' if len(c.jobs) > 1 else ''}: {getattr(c, error):+.2f} %"
        f" ({c.ledger_kwh * 1000:.1f} Wh charged, truth {c.truth_kwh * 1000:.1f} Wh)"
        for c in checks
        if abs(getattr(c, error)) > TOLERANCE_PCT
    ]


def test_the_run_covers_every_job_shape_and_jobs_that_end_and_start(run: Comparison) -> None:
    kinds = {job.kind for job in run.led.jobs}
    assert kinds == {"pod", "slurm"}
    shared = [c for c in run.jobs if len(c.jobs) > 1]  # MIG pods: three on a GPU
    assert shared
    assert len(run.jobs) > 50  # first waves and the drawn ones after them
    assert run.led.states["stalled"].gpu_hours > 0  # the hung collective was judged
    assert run.led.states["unallocated"].gpu_hours > 0  # gaps between waves


def test_the_metered_facility_energy_is_what_the_simulated_facility_drew(
    run: Comparison,
) -> None:
    # Samples every 10 s through the site collectors, 1-minute means, summed: the meter the
    # ledger reconciles against is the model's own energy, or nothing below means much.
    assert run.led.metered_facility_kwh == pytest.approx(run.truth_facility_kwh, rel=0.005)


def test_each_job_is_charged_the_energy_of_every_gpu_minute_it_held_within_2_percent(
    run: Comparison,
) -> None:
    # The ledger's rule (docs/ledger.md, "A job's energy"): all of a GPU-minute's energy to
    # the jobs holding any part of it, split evenly. Counters, rollups and intervals must
    # give that figure for every job, short ones included.
    assert _off(run.jobs, "whole_minutes_error_pct") == []


@pytest.mark.xfail(
    strict=True,
    reason="the ledger charges a job the whole of its first and last minute (measured: an"
    " allocation held 6 minutes at idle +13.9 %, inference pods of 6-10 minutes +2 to +5 %);"
    " the excess is exactly the energy of those minutes' unheld seconds",
)
def test_each_job_is_charged_within_2_percent_of_the_energy_its_gpus_used(
    run: Comparison,
) -> None:
    assert _off(run.jobs, "error_pct") == []


@pytest.mark.xfail(
    strict=True,
    reason="IT power no node reports (the racks' switches, PDUs and fans: 1.5 kW a rack in"
    " fleetsim/fleet.py) is metered but charged to no one: measured −7.2 %",
)
def test_jobs_pool_and_overhead_add_up_to_the_facility_meter_within_2_percent(
    run: Comparison,
) -> None:
    assert abs(run.reconcile_pct) <= TOLERANCE_PCT


def test_the_ledgers_gpu_and_node_energy_is_what_the_simulated_nodes_drew(
    run: Comparison,
) -> None:
    # GPU counters plus each node's power beside its GPUs: every node's energy, to within
    # what sampling node power every 10 s misses (measured: 0.02 %).
    assert run.ledger_it_kwh == pytest.approx(run.truth.nodes_j / KWH, rel=0.005)


def test_the_reconciliation_gap_is_the_racks_own_it_energy_no_node_reports(
    run: Comparison,
) -> None:
    # What the xfail above misses, and no more: with the racks' own draw (as the model drew
    # it) and its overhead, the ledger is the meter to within sampling (measured: 0.04 %).
    racks_kwh = (run.truth.it_j - run.truth.nodes_j) / KWH
    assert run.led.unmetered_it_kwh == pytest.approx(racks_kwh, rel=0.02)
    assert abs(run.with_rack_it_pct) <= TOLERANCE_PCT / 4
