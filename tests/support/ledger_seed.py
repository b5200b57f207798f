"""The energy ledger's seeded site, where the truth is known: two nodes, one GPU per case (a
training job, an allocation running nothing, bursty inference, a hung collective, a process
holding memory on an idle GPU, an unallocated GPU, a driver reload, a GPU without an energy
counter, a GPU shared by two jobs, a lost GPU), 1-minute rows over two hours from `t0`
(and 15 minutes before, 10 after: runs that cross the window's edges), two hours with
different PUEs, and the jobs' intervals open throughout. The shared GPU's two jobs have SM
activity kept (75 % and 25 %) until the end of the first hour and none after it.

tests/fleet/test_ledger.py holds the ledger to a Python fold of these rows;
tests/dashboard/test_efficiency_page.py reads the efficiency page over them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connections, transaction

from fleet.models import GPU, GpuAllocation, Hall, Node, Rack, Site, Workload

HOURS = 2  # the window the cases are built for: [t0, t0 + 2 h)
BEFORE_S, AFTER_S = 900, 600  # rows seeded before and after it
LIMIT_W = 700.0
NODE_A_OTHER_W, NODE_B_OTHER_W = 1000.0, 400.0
PUE_BY_HOUR = (1.3, 1.5)  # the window's first and second hour; 1.2 around them
E0 = 1e6  # every counter's value before the first minute seeded
# The shared GPU's jobs' SM activity (%) in each snapshot, kept for the minutes before
# t0 + SM_UNTIL_S: six snapshots a minute, as the agent's 10 s cadence sends.
SM_PCT = {"left": 75.0, "right": 25.0}
SM_UNTIL_S = 3600
SNAPSHOTS_PER_MINUTE = 6


@dataclass
class Seed:
    """The rows seeded, as an oracle reads them."""

    t0: int = 0
    site_id: int = 0
    gpus: dict[tuple[int, int, int], dict[str, Any]] = field(default_factory=dict)
    nodes: dict[tuple[int, int], float] = field(default_factory=dict)
    facility: dict[int, tuple[float, float]] = field(default_factory=dict)
    # (node, gpu, workload, source, started, last_seen, ended)
    intervals: list[tuple[int, int, int, str, float, float, float | None]] = field(
        default_factory=list
    )
    names: dict[str, int] = field(default_factory=dict)  # job → workload id
    # (node, gpu, bucket, workload) → SM activity summed over the minute's snapshots
    shares: dict[tuple[int, int, int, int], float] = field(default_factory=dict)
    where: dict[str, tuple[int, int]] = field(default_factory=dict)  # case → node, GPU

    @property
    def window(self) -> tuple[int, int]:
        return self.t0, self.t0 + HOURS * 3600


def minute_values(case: str, i: int) -> tuple[float | None, float | None, float | None, float]:
    """(util mean, util max, power W, memory MiB) of `case` in minute i (0 = t0)."""
    if case in ("training", "reload", "no_counter"):
        if case == "training" and 0 <= i < 8:
            return 0.0, 0.0, 70.0, 500.0  # loading: 8 idle minutes are not an idle allocation
        return 95.0, 100.0, 600.0, 60_000.0
    if case == "empty":
        return 0.0, 0.0, 70.0, 0.5
    if case == "bursty":
        return (12.0, 70.0, 250.0, 20_000.0) if i % 4 == 0 else (0.0, 0.0, 80.0, 20_000.0)
    if case == "hung":
        return 100.0, 100.0, 150.0, 70_000.0
    if case == "held":
        return 0.0, 0.0, 75.0, 30_000.0
    if case == "unallocated":
        return 0.0, 0.0, 60.0, 0.5
    if case == "shared":
        return 80.0, 100.0, 500.0, 40_000.0
    return None, None, None, 0.0  # lost: the node reports, this GPU says nothing


NODE_A = ("training", "empty", "bursty", "hung", "held", "unallocated", "reload", "no_counter")
NODE_B = ("shared", "lost")

# name: (kind, key, cases, source, namespace); every job's account is "physics".
JOBS: dict[str, tuple[str, str, tuple[str, ...], str, str]] = {
    "train": ("slurm", "1001", ("training", "reload", "no_counter"), "scheduler", ""),
    "empty": ("slurm", "1002", ("empty",), "scheduler", ""),
    "infer": ("pod", "serving/infer-0", ("bursty",), "scheduler", "serving"),
    # the same pod, by UID
    "infer-procs": ("pod", "7c1f-uid", ("bursty",), "process", "serving"),
    "hung": ("slurm", "1004", ("hung",), "scheduler", ""),
    "notebook": ("user", "1000", ("held",), "process", ""),
    "left": ("pod", "team-a/left", ("shared",), "scheduler", "team-a"),
    "right": ("pod", "team-b/right", ("shared",), "scheduler", "team-b"),
}


def insert(using: str, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    marks = ", ".join(["%s"] * len(columns))
    # one transaction: SQLite autocommit would fsync every row
    with transaction.atomic(using=using), connections[using].cursor() as cur:
        cur.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", list(rows))


def seed(using: str, t0: int, slug: str = "s1", name: str = "Site 1") -> Seed:
    """The site, its rows and its jobs, around [t0, t0 + 2 h); t0 on an hour boundary."""
    site = Site.objects.using(using).create(
        slug=slug, name=name, grid_gco2_per_kwh=300.0, tariff_per_kwh=0.2,
        gpu_hour_price=1.5, currency="EUR",
    )  # fmt: skip
    hall = Hall.objects.using(using).create(site=site, name="A")
    rack = Rack.objects.using(using).create(hall=hall, name="A01", power_budget_kw=80)
    s = Seed(t0=t0, site_id=site.id)
    gpu_rows, node_rows = [], []
    seeded = range(t0 - BEFORE_S, t0 + HOURS * 3600 + AFTER_S, 60)
    for cases, other in ((NODE_A, NODE_A_OTHER_W), (NODE_B, NODE_B_OTHER_W)):
        node = Node.objects.using(using).create(name=f"{slug}-n{len(s.where)}", rack=rack)
        GPU.objects.using(using).bulk_create(GPU(node=node, index=i) for i in range(len(cases)))
        for index, case in enumerate(cases):
            s.where[case] = (node.id, index)
        for bucket in seeded:
            watts = other
            for index, case in enumerate(cases):
                row = gpu_row(case, (bucket - t0) // 60)
                if row is None:
                    continue
                s.gpus[(node.id, index, bucket)] = row
                gpu_rows.append(
                    (node.id, index, bucket, 60, row["util"], row["util_max"], row["power"],
                     LIMIT_W, row["mem"], row["e"])
                )  # fmt: skip
                watts += row["power"] or 0.0
            s.nodes[(node.id, bucket)] = watts
            node_rows.append((node.id, bucket, 60, watts))
    pue = {t0 + k * 3600: value for k, value in enumerate(PUE_BY_HOUR)}
    for bucket in seeded:
        it = sum(w for (_, b), w in s.nodes.items() if b == bucket)
        s.facility[bucket] = (it * pue.get(bucket - bucket % 3600, 1.2), it)
    _insert_rows(using, site.id, s, gpu_rows, node_rows)
    allocate(using, site, s)
    share(using, s, [b for b in seeded if b < t0 + SM_UNTIL_S])
    return s


def share(using: str, s: Seed, buckets: Sequence[int]) -> None:
    """The shared GPU's SM activity per minute of `buckets`, as the ingest writer keeps it."""
    node_id, gpu = s.where["shared"]
    for name, pct in SM_PCT.items():
        for bucket in buckets:
            s.shares[(node_id, gpu, bucket, s.names[name])] = pct * SNAPSHOTS_PER_MINUTE
    insert(
        using,
        "fw_gpu_share_1m",
        ("node_id", "gpu", "bucket", "workload_id", "sm_sum", "samples"),
        [(*key, sm, SNAPSHOTS_PER_MINUTE) for key, sm in s.shares.items()],
    )


def _insert_rows(
    using: str, site_id: int, s: Seed, gpu_rows: list[Any], node_rows: list[Any]
) -> None:
    facility = ("site_id", "bucket", "n", "total_power_w_mean", "it_power_w_mean")
    hours = sorted({b - b % 3600 for b in s.facility})
    hourly = [
        (site_id, h, 60, *(sum(v[k] for b, v in s.facility.items() if h <= b < h + 3600) / 60
                           for k in (0, 1)))
        for h in hours
    ]  # fmt: skip
    insert(using, "fw_facility_1h", facility, hourly)
    columns = ("util_gpu_pct_mean", "util_gpu_pct_max", "power_w_mean", "power_limit_w_mean")
    insert(
        using,
        "fw_gpu_1m",
        ("node_id", "gpu", "bucket", "n", *columns, "mem_used_mib_max", "energy_j_last"),
        gpu_rows,
    )
    insert(using, "fw_node_1m", ("node_id", "bucket", "n", "power_w_mean"), node_rows)
    minutes = [(site_id, b, 60, total, it) for b, (total, it) in sorted(s.facility.items())]
    insert(using, "fw_facility_1m", facility, minutes)


def gpu_row(case: str, i: int) -> dict[str, Any] | None:
    """A 1m row: the counter read at the minute's end (E0 + power × time so far); a driver
    reload half-way through minute 60 restarts it from zero."""
    if case == "lost" and i >= 20:
        return None  # gone off the bus: no rows at all
    util, util_max, power, mem = minute_values(case, i)
    used = sum(minute_values(case, k)[2] or 0.0 for k in range(-15, i + 1)) * 60
    e: float | None = E0 + used
    if case == "reload" and i >= 60:
        e = sum(minute_values(case, k)[2] or 0.0 for k in range(61, i + 1)) * 60 + 600.0 * 30
    if case in ("no_counter", "lost"):
        e = None
    return {"util": util, "util_max": util_max, "power": power, "mem": mem, "e": e}


def allocate(using: str, site: Site, s: Seed) -> None:
    """Each job's intervals: open, started an hour before t0, seen until after the rows."""
    started, last_seen = float(s.t0 - 3600), float(s.t0 + HOURS * 3600 + AFTER_S + 5)
    for name, (kind, key, cases, source, namespace) in JOBS.items():
        wl = Workload.objects.using(using).create(
            site=site, kind=kind, key=key, namespace=namespace, account="physics", user=name,
            first_seen=s.t0 - 3600,
        )  # fmt: skip
        s.names[name] = wl.id
        for case in cases:
            node_id, gpu = s.where[case]
            GpuAllocation.objects.using(using).create(
                site=site, node_id=node_id, gpu=gpu, workload=wl, source=source,
                started=started, last_seen=last_seen, ended=None,
            )  # fmt: skip
            s.intervals.append((node_id, gpu, wl.id, source, started, last_seen, None))


def rolled_up_to(using: str, minutes: int, hours: int) -> None:
    """The rollup tiers' progress, as the rollup would leave it: the minutes of GPUs and
    nodes before `minutes`, the hours of GPUs, nodes and the facility before `hours`."""
    with transaction.atomic(using=using), connections[using].cursor() as cur:
        cur.execute("DELETE FROM fw_rollup_state")
        for tier, kinds, until in (
            ("1m", ("gpu", "node"), minutes),
            ("1h", ("gpu", "node", "facility"), hours),
        ):
            for kind in kinds:
                cur.execute(
                    "INSERT INTO fw_rollup_state (tier, kind, done_until, sealed_until)"
                    " VALUES (%s, %s, %s, %s)",
                    [tier, kind, until, until],
                )


def kept(using: str, minutes: int, hours: int, now: float) -> None:
    """The stored ledger (fleet/read/ledger_store.py) kept over seeded rows the rollup tiers
    reach as `rolled_up_to` says, as the `fleet.ledger` task would at `now`."""
    from fleet.storage.ledger import keep

    rolled_up_to(using, minutes, hours)
    keep(now, using=using)
