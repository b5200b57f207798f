"""The energy ledger on the simulator, where the truth is known (issue 21): 8 H200 nodes, one
per job shape (training pods and Slurm jobs, bursty inference, MIG pods, an allocation
running nothing, a hung collective, a SLUID node, a job using one of its eight GPUs), three
hours of simulated time through real agent outboxes into a real server (embedded tier),
rolled up, and the ledger over those minutes set beside what the simulated GPUs and
facility really used (fleetsim/truth.py; the run: tests/support/ledger_truth.py).

A job's intervals open when its processes started and close midway between the snapshots
around its end; it is charged the part of each bucket its interval covers, with the energy
the GPU drew in the uncovered part (at the bucket's lowest power) left to the pool, and IT
energy no node reports is the pool's (docs/ledger.md): each job is within 2 % of what its
GPUs used while it held them, and jobs, pool and overhead add up to the facility meter.
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
SNAPSHOT_S = 10.0  # the workloads collector's cadence in the run


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
        f" ({c.ledger_kwh * 1000:.1f} Wh charged, truth {c.truth_kwh * 1000:.1f} Wh;"
        f" the rule at exact edges {c.exact_edges_error_pct:+.2f} %)"
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


def test_each_jobs_intervals_start_with_it_and_end_within_5_s_of_its_end(
    run: Comparison,
) -> None:
    # Starts from the fake /proc's stat files (to the 1/100 s tick); ends midway between the
    # last snapshot that listed the job and the first without it, 10 s apart.
    starts = [abs(e.start_error_s) for e in run.edges]
    ends = [e.end_error_s for e in run.edges if e.end_error_s is not None]
    assert len(starts) > 100 and len(ends) > 50
    assert max(starts) <= 0.01
    assert max(abs(end) for end in ends) <= SNAPSHOT_S / 2 + 0.01
    assert abs(sum(ends) / len(ends)) < 1.5  # no bias: as many a little early as late


def test_each_job_is_charged_within_2_percent_of_the_energy_its_gpus_used(
    run: Comparison,
) -> None:
    assert _off(run.jobs, "error_pct") == []


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


def test_the_it_no_node_reports_is_the_racks_own_energy_and_the_pools(
    run: Comparison,
) -> None:
    # The racks' switches, PDUs and fans (as the model drew them): metered as IT, reported by
    # no node, charged to the pool (to within what sampling node power every 10 s misses).
    racks_kwh = (run.truth.it_j - run.truth.nodes_j) / KWH
    assert run.led.unmetered_it_kwh == pytest.approx(racks_kwh, rel=0.02)
    assert run.led.pool.it_kwh >= run.led.unmetered_it_kwh
