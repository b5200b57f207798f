"""The allocated-idle alert (fleet/alerts/holders.is_idle, one latest reading) and the energy
ledger (fleet/read/ledger_sql.py, 1-minute rows) judge idleness by the same thresholds
(fleet/read/ledger_rules.py): for every reading at and around each threshold — utilisation
at 5 %, power at a quarter of the limit, a limit of 0 W or none reported (120 W then) — a GPU
held twelve minutes at that reading is `allocated_idle` in the ledger exactly when the
alert's test calls it idle."""

from __future__ import annotations

import pytest
from django.db import connection

from fleet.alerts.holders import is_idle
from fleet.models import GPU, GpuAllocation, Hall, Node, Rack, Site, Workload
from fleet.read import ledger_rules as r
from fleet.read.ledger import ledger
from fleet.read.ledger_rules import DEFAULT_RULES
from fleet.read.ledger_sql import Window
from tests.support.databases import T
from tests.support.ledger_seed import insert

pytestmark = pytest.mark.django_db

MINUTES = DEFAULT_RULES.idle_minutes + 2
FRACTION = DEFAULT_RULES.idle_power_fraction
WATTS = DEFAULT_RULES.idle_power_w
UTIL = DEFAULT_RULES.idle_util_pct

# (utilisation %, power W, power limit W or None): on, under and over each threshold
READINGS: tuple[tuple[float, float, float | None], ...] = (
    (0.0, 70.0, 700.0),
    (UTIL - 0.01, 70.0, 700.0),
    (UTIL, 70.0, 700.0),
    (0.0, FRACTION * 700.0, 700.0),
    (0.0, FRACTION * 700.0 + 0.5, 700.0),
    (0.0, WATTS, 0.0),  # a limit of 0 W is no limit known
    (0.0, WATTS + 0.5, 0.0),
    (0.0, WATTS, None),
    (0.0, WATTS + 0.5, None),
    (0.0, FRACTION * 72.0, 72.0),  # an L4: a quarter of 72 W
    (0.0, FRACTION * 72.0 + 0.5, 72.0),
)


def test_the_ledger_and_the_alert_call_the_same_readings_idle() -> None:
    site = Site.objects.create(slug="agree", name="Agree")
    rack = Rack.objects.create(
        hall=Hall.objects.create(site=site, name="A"), name="A01", power_budget_kw=80
    )
    node = Node.objects.create(name="n1", rack=rack)
    wl = Workload.objects.create(site=site, kind="slurm", key="1", first_seen=T - 3600)
    rows = []
    for index, (util, power, limit) in enumerate(READINGS):
        GPU.objects.create(node=node, index=index)
        GpuAllocation.objects.create(
            site=site, node=node, gpu=index, workload=wl, source="scheduler",
            started=T - 3600, last_seen=T + 3600, ended=None,
        )  # fmt: skip
        rows += [
            (node.id, index, T + 60 * m, 60, util, util, power, limit, 0.5, None)
            for m in range(MINUTES)
        ]
    insert(
        connection.alias,
        "fw_gpu_1m",
        ("node_id", "gpu", "bucket", "n", "util_gpu_pct_mean", "util_gpu_pct_max",
         "power_w_mean", "power_limit_w_mean", "mem_used_mib_max", "energy_j_last"),
        rows,
    )  # fmt: skip
    led = ledger(Window(site.id, T, T + 60 * MINUTES, "1m"))
    judged = {g.gpu: set(g.states) for g in led.gpus}
    for index, (util, power, limit) in enumerate(READINGS):
        alert_idle = is_idle(util, power, limit)
        ledger_idle = judged[index] == {r.ALLOCATED_IDLE}
        assert ledger_idle == alert_idle, (util, power, limit, judged[index])
    # both answers occur: the readings straddle the thresholds
    assert {is_idle(*reading) for reading in READINGS} == {True, False}
