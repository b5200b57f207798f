"""The energy ledger on both engines, over seeded 1-minute rows where the truth is known:
two nodes, one GPU per case (a training job, an allocation running nothing, bursty
inference, a hung collective, a process holding memory on an idle GPU, an unallocated GPU,
a driver reload, a GPU without an energy counter, a GPU shared by two jobs, a lost GPU),
two hours with different PUEs (seeded by tests/support/ledger_seed.py).

The SQL path (fleet/read/ledger.py) is held to `fold`, a plain Python reading of the same
rows (the oracle); each behaviour is then asserted on the SQL's answer in the figures a user
reads. One database per tier for the module: the ledger only reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fleet.read import ledger_rules as r
from fleet.read.ledger import EVEN, EXCLUSIVE, SM, JobLedger, Ledger, Line, ledger
from fleet.read.ledger_rules import DEFAULT_RULES, LedgerRules
from fleet.read.ledger_sql import Window
from tests.support.databases import T, TierDb, fresh_db
from tests.support.ledger_seed import LIMIT_W, Seed, minute_values, seed

A, B = T, T + 7200  # the window: two hours


# -- the oracle: the same rules read row by row ---------------------------------------------


def energy_of(s: Seed, key: tuple[int, int, int]) -> tuple[float, int, int]:
    """(J, estimated, reset) of one GPU-minute."""
    row, prev = s.gpus[key], s.gpus.get((key[0], key[1], key[2] - 60))
    if row["e"] is not None and prev is not None and prev["e"] is not None:
        reset = row["e"] < prev["e"]
        return (row["e"] if reset else row["e"] - prev["e"]), 0, int(reset)
    if row["power"] is not None:
        return row["power"] * 60, 1, 0
    return 0.0, 0, 0


def holders_of(s: Seed, node: int, gpu: int, bucket: int) -> tuple[list[int], int]:
    on = [
        (wl, src)
        for n, g, wl, src, start, seen, end in s.intervals
        if n == node and g == gpu and start < bucket + 60
        and ((end is None and seen >= bucket) or (end is not None and end > bucket))
    ]  # fmt: skip
    sched = sorted(wl for wl, src in on if src == "scheduler")
    procs = len({wl for wl, src in on if src == "process"})
    return (sched or sorted(wl for wl, _ in on)), procs


def flags(s: Seed, key: tuple[int, int, int], rules: LedgerRules) -> tuple[bool, bool]:
    row = s.gpus[key]
    if not holders_of(s, *key)[0] or row["power"] is None:
        return False, False
    idle = row["util_max"] < rules.idle_util_pct and row["power"] <= LIMIT_W * 0.25
    stall = row["util"] >= rules.stall_util_pct and row["power"] <= LIMIT_W * 0.35
    return idle, stall


def run_length(s: Seed, key: tuple[int, int, int], which: int, rules: LedgerRules) -> int:
    """Minutes in the unbroken run of the flag around `key`."""
    n, g, b = key
    length = 1
    for step in (-60, 60):
        k = b + step
        while (n, g, k) in s.gpus and flags(s, (n, g, k), rules)[which]:
            length, k = length + 1, k + step
    return length


def state_of(s: Seed, key: tuple[int, int, int], rules: LedgerRules) -> str:
    row = s.gpus[key]
    holders, procs = holders_of(s, *key)
    idle, stall = flags(s, key, rules)
    if row["util"] is None and row["power"] is None:
        return r.LOST
    if not holders:
        return r.UNALLOCATED
    if stall and run_length(s, key, 1, rules) >= rules.stall_minutes:
        return r.STALLED
    if idle and run_length(s, key, 0, rules) >= rules.idle_minutes:
        held = procs > 0 or row["mem"] >= rules.held_memory_mib
        return r.IDLE_HELD_MEMORY if held else r.ALLOCATED_IDLE
    return r.BUSY


def fold(s: Seed, rules: LedgerRules) -> tuple[dict[Any, list[float]], dict[Any, list[float]]]:
    """{(node, gpu, state): [minutes, GPU J, node J, overhead J, estimated, resets]} and
    {(workload, state): [GPU-minutes, GPU J, node J, overhead J]}."""
    gpus: dict[Any, list[float]] = {}
    jobs: dict[Any, list[float]] = {}
    for n, g, b in sorted(s.gpus):
        if not A <= b < B:
            continue
        state = state_of(s, (n, g, b), rules)
        gpu_e, estimated, reset = energy_of(s, (n, g, b))
        mine = [row for (nn, _, bb), row in s.gpus.items() if nn == n and bb == b]
        other = s.nodes[(n, b)] - sum(row["power"] or 0.0 for row in mine)
        node_e = max(other, 0.0) * 60 / len(mine)
        total, it = s.facility[b]
        over = (gpu_e + node_e) * (total / it - 1)
        line = gpus.setdefault((n, g, state), [0.0] * 6)
        for i, v in enumerate((1, gpu_e, node_e, over, estimated, reset)):
            line[i] += v
        holders, _ = holders_of(s, n, g, b)
        pue_x = total / it - 1
        for wl, part in sm_parts(s, n, g, b, holders):
            share = jobs.setdefault((wl, state), [0.0] * 4)
            job_gpu_e, job_node_e = gpu_e * part, node_e / len(holders)
            for i, v in enumerate((1 / len(holders), job_gpu_e, job_node_e)):
                share[i] += v
            share[3] += (job_gpu_e + job_node_e) * pue_x
    return gpus, jobs


def sm_parts(s: Seed, n: int, g: int, b: int, holders: list[int]) -> list[tuple[int, float]]:
    """Each holder's part of the GPU's energy in a minute: its SM activity over theirs
    where two or more hold it and each has some kept, else an even part."""
    sm = [s.shares.get((n, g, b, wl)) for wl in holders]
    known = [v for v in sm if v is not None]
    if len(holders) >= 2 and len(known) == len(holders) and sum(known) > 0:
        return [(wl, v / sum(known)) for wl, v in zip(holders, known, strict=True)]
    return [(wl, 1 / len(holders)) for wl in holders]


# -- fixtures -------------------------------------------------------------------------------


@dataclass
class Case:
    tdb: TierDb
    seed: Seed
    led: Ledger


@pytest.fixture(scope="module")
def case(
    tier: str, tmp_path_factory: pytest.TempPathFactory, django_db_blocker: Any
) -> Iterator[Case]:
    var_dir: Path = tmp_path_factory.mktemp(f"ledger-{tier}")
    with fresh_db(tier, var_dir, tmp_path_factory, django_db_blocker) as tdb:
        s = seed(tdb.alias, T)
        led = ledger(Window(s.site_id, A, B), DEFAULT_RULES, using=tdb.alias)
        yield Case(tdb, s, led)


def gpu_line(c: Case, name: str) -> dict[str, Line]:
    node, gpu = c.seed.where[name]
    (found,) = [g for g in c.led.gpus if (g.node_id, g.gpu) == (node, gpu)]
    return found.states


def job(c: Case, name: str) -> JobLedger:
    (found,) = [j for j in c.led.jobs if j.workload_id == c.seed.names[name]]
    return found


KWH = 3.6e6


# -- tests ----------------------------------------------------------------------------------


def test_the_sql_ledger_equals_the_python_fold_of_the_same_minutes(case: Case) -> None:
    gpus, jobs = fold(case.seed, DEFAULT_RULES)
    got_gpus = {
        (g.node_id, g.gpu, state): [
            round(line.gpu_hours * 60), line.energy.gpu_kwh * KWH, line.energy.node_kwh * KWH,
            line.energy.overhead_kwh * KWH, line.estimated_hours * 60, line.resets,
        ]
        for g in case.led.gpus for state, line in g.states.items()
    }  # fmt: skip
    lost_without_rows = got_gpus.pop((*case.seed.where["lost"], r.LOST))
    assert lost_without_rows[0] == 120  # 20 silent rows + 100 minutes without any
    expected_lost = gpus.pop((*case.seed.where["lost"], r.LOST))
    assert expected_lost[0] == 20
    assert got_gpus.keys() == gpus.keys()
    for key, want in gpus.items():
        assert got_gpus[key] == pytest.approx(want, rel=1e-9, abs=1e-6), key
    got_jobs = {
        (j.workload_id, state): [
            line.gpu_hours * 60, line.energy.gpu_kwh * KWH, line.energy.node_kwh * KWH,
            line.energy.overhead_kwh * KWH,
        ]
        for j in case.led.jobs for state, line in j.states.items()
    }  # fmt: skip
    assert got_jobs.keys() == jobs.keys()
    for key, want in jobs.items():
        assert got_jobs[key] == pytest.approx(want, rel=1e-9, abs=1e-6), key


@pytest.mark.parametrize(
    ("gpu", "state"),
    [
        ("training", r.BUSY),  # its first 8 idle minutes too: shorter than the rule's 10
        ("empty", r.ALLOCATED_IDLE),
        ("bursty", r.BUSY),
        ("hung", r.STALLED),
        ("held", r.IDLE_HELD_MEMORY),
        ("unallocated", r.UNALLOCATED),
        ("shared", r.BUSY),
        ("lost", r.LOST),
    ],
)
def test_each_gpu_spends_the_whole_window_in_the_state_its_use_shows(
    case: Case, gpu: str, state: str
) -> None:
    states = gpu_line(case, gpu)
    assert list(states) == [state]
    assert states[state].gpu_hours == pytest.approx(2.0)


def test_a_driver_reload_restarts_the_counter_without_losing_the_hours_after_it(
    case: Case,
) -> None:
    line = gpu_line(case, "reload")[r.BUSY]
    assert line.resets == 1
    # 600 W for 2 h, less the half minute before the reload the counter forgot
    assert line.energy.gpu_kwh == pytest.approx(600 * (7200 - 30) / KWH)
    assert line.estimated_hours == 0


def test_a_gpu_without_an_energy_counter_is_estimated_from_power_and_flagged(
    case: Case,
) -> None:
    line = gpu_line(case, "no_counter")[r.BUSY]
    assert line.estimated_hours == pytest.approx(2.0)
    assert line.energy.gpu_kwh == pytest.approx(600 * 2 / 1000)
    assert gpu_line(case, "training")[r.BUSY].estimated_hours == 0


def test_a_shared_gpu_is_split_by_sm_activity_where_kept_and_evenly_where_not(
    case: Case,
) -> None:
    left, right = job(case, "left"), job(case, "right")
    assert left.split == right.split == SM
    # 500 W for an hour at 75 % / 25 % SM activity, then an hour without: half each
    assert left.total.energy.gpu_kwh == pytest.approx((0.75 + 0.5) * 500 / 1000)
    assert right.total.energy.gpu_kwh == pytest.approx((0.25 + 0.5) * 500 / 1000)
    # time and the node's share stay even: each held the GPU the whole two hours
    assert left.total.gpu_hours == right.total.gpu_hours == pytest.approx(1.0)
    assert left.total.energy.node_kwh == pytest.approx(right.total.energy.node_kwh)
    assert job(case, "train").split == EXCLUSIVE


def test_a_shared_gpu_without_sm_activity_is_split_evenly(case: Case) -> None:
    second_hour = Window(case.seed.site_id, A + 3600, B)
    led = ledger(second_hour, DEFAULT_RULES, using=case.tdb.alias)
    left, right = (
        next(j for j in led.jobs if j.workload_id == case.seed.names[name])
        for name in ("left", "right")
    )
    assert left.split == right.split == EVEN
    assert left.total.energy.gpu_kwh == pytest.approx(0.5 * 500 / 1000)
    assert right.total.energy == left.total.energy


def test_a_pods_processes_do_not_halve_what_its_allocation_is_charged(case: Case) -> None:
    infer = job(case, "infer")
    assert infer.split == EXCLUSIVE
    watts = sum(minute_values("bursty", i)[2] or 0.0 for i in range(120)) * 60
    assert infer.total.energy.gpu_kwh == pytest.approx(watts / KWH)
    assert case.seed.names["infer-procs"] not in {j.workload_id for j in case.led.jobs}


def test_a_job_pays_its_share_of_the_nodes_non_gpu_power(case: Case) -> None:
    # 3 of node A's 8 GPUs for 2 h of 1,000 W that is not GPU power
    assert job(case, "train").total.energy.node_kwh == pytest.approx(3 / 8 * 1000 * 2 / 1000)
    # node B's GPU shared by two jobs: one of 2 GPUs for 20 minutes, then the only one
    # reporting (the other is lost) for 100: the node's 400 W serve what still runs
    node_b_kwh = (400 / 2 * 20 + 400 * 100) / 60 / 1000
    assert job(case, "left").total.energy.node_kwh == pytest.approx(0.5 * node_b_kwh)


def test_the_facility_overhead_follows_each_hours_pue(case: Case) -> None:
    empty = job(case, "empty").total.energy  # the same IT power in both hours
    hourly_it = empty.it_kwh / 2
    assert empty.overhead_kwh == pytest.approx(hourly_it * 0.3 + hourly_it * 0.5)


def test_an_idle_allocation_is_charged_to_its_owner_and_an_unallocated_gpu_to_the_pool(
    case: Case,
) -> None:
    empty = job(case, "empty")
    assert list(empty.states) == [r.ALLOCATED_IDLE]
    assert empty.total.energy.gpu_kwh == pytest.approx(70 * 2 / 1000)
    unallocated = gpu_line(case, "unallocated")[r.UNALLOCATED].energy
    assert case.led.pool.gpu_kwh == pytest.approx(unallocated.gpu_kwh)


def test_attributed_idle_unallocated_and_overhead_add_up_to_the_facility_meter(
    case: Case,
) -> None:
    led = case.led
    assert led.metered_facility_kwh > 0
    error = led.reconcile_error_pct
    assert error is not None and abs(error) <= 2.0
    assert led.unmetered_it_kwh == pytest.approx(0.0, abs=0.01)


def test_carbon_and_cost_come_from_the_sites_rates(case: Case) -> None:
    train = job(case, "train")
    kwh, hours = train.total.energy.total_kwh, train.total.gpu_hours
    assert train.price.carbon_kg == pytest.approx(kwh * 0.3)
    assert train.price.cost == pytest.approx(kwh * 0.2 + hours * 1.5)
    assert train.price.currency == "EUR"
