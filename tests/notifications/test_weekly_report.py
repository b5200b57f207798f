"""The weekly report: its figures are the energy ledger's for the week (GPU-hours by state,
energy, cost and carbon per team, the allocations idle longest); the Slack message goes once
per site and week to the site's route, with the download's link; the beat looks for it on
the maintenance queue and each tick expires before the next; the download (CSV and table)
is a 404 for a viewer of another site.

Seeded hourly rows of ISO week 2026-W10 at site Demo (tests/support/roles.py): on A01's GPU
a pod of ml-research trains for six hours, on A02's GPU a Slurm job of physics holds the
GPU and runs nothing."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

import pytest
from django.db import connection, transaction

from fleet.models import GPU, GpuAllocation, Site, Workload
from fleet.notifications.models import Route
from fleet.notifications.weekly import send_weekly_reports
from fleet.read import ledger_rules as r
from fleet.read.ledger import ledger
from fleet.read.ledger_sql import Window
from fleet.read.weekly_report import POOL, week_bounds, weekly_report
from fleetwatch.celery import MAINTENANCE
from fleetwatch.celery import app as fleet_app
from tests.support import people, roles
from tests.support.alert_engine import deliver_all
from tests.support.ledger_seed import kept
from tests.support.roles import person, signed_in
from tests.support.slack_receiver import SlackReceiver

pytestmark = pytest.mark.django_db

fast_passwords = people.fast_passwords  # autouse
sites = roles.demo_and_north

HOUR = 3600
YEAR, WEEK = 2026, 10
A, B = week_bounds(YEAR, WEEK)
HOURS = 6
E0 = 5e8  # each counter's reading before the week
LIMIT_W = 700.0
NODE_OTHER_W = 800.0
PUE = 1.4


def insert(table: str, columns: tuple[str, ...], rows: Sequence[tuple[float, ...]]) -> None:
    marks = ", ".join(["%s"] * len(columns))
    with transaction.atomic(), connection.cursor() as cur:
        cur.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)


def hold(site: Site, gpu: GPU, kind: str, key: str, **names: str) -> Workload:
    workload = Workload.objects.create(site=site, kind=kind, key=key, first_seen=A - HOUR, **names)
    GpuAllocation.objects.create(
        site=site, node=gpu.node, gpu=gpu.index, workload=workload, source="scheduler",
        started=A - HOUR, last_seen=A + HOURS * HOUR, ended=A + HOURS * HOUR,
    )  # fmt: skip
    return workload


@pytest.fixture
def week(sites: tuple[Site, Site]) -> Site:
    """Six hours of 2026-W10 at Demo: a training pod and an allocation running nothing."""
    demo = sites[0]
    Site.objects.filter(pk=demo.pk).update(
        grid_gco2_per_kwh=300.0, tariff_per_kwh=0.2, gpu_hour_price=1.5, currency="EUR"
    )
    train = GPU.objects.get(node__rack__name="A01")
    empty = GPU.objects.get(node__rack__name="A02")
    hold(demo, train, "pod", "ml-research/train-0", namespace="ml-research", pod="train-0",
         user="alice")  # fmt: skip
    hold(demo, empty, "slurm", "1001", account="physics", job="1001", user="bob")
    gpu_rows, node_rows, facility_rows = [], [], []
    for k in range(-1, HOURS):
        bucket = A + k * HOUR
        it = 0.0
        for gpu, util, watts in ((train, 95.0, 600.0), (empty, 0.0, 70.0)):
            energy = E0 + watts * HOUR * (k + 1)
            gpu_rows.append(
                (gpu.node_id, gpu.index, bucket, 60, util, util, watts, LIMIT_W, 500.0, energy)
            )
            node_rows.append((gpu.node_id, bucket, 60, watts + NODE_OTHER_W))
            it += watts + NODE_OTHER_W
        facility_rows.append((demo.pk, bucket, 60, it * PUE, it))
    gpu_columns = ("util_gpu_pct_mean", "util_gpu_pct_max", "power_w_mean", "power_limit_w_mean")
    insert(
        "fw_gpu_1h",
        ("node_id", "gpu", "bucket", "n", *gpu_columns, "mem_used_mib_max", "energy_j_last"),
        gpu_rows,
    )
    insert("fw_node_1h", ("node_id", "bucket", "n", "power_w_mean"), node_rows)
    columns = ("site_id", "bucket", "n", "total_power_w_mean", "it_power_w_mean")
    insert("fw_facility_1h", columns, facility_rows)
    # the rollups past the week; the `fleet.ledger` task has closed its hours
    kept("default", minutes=B + 2 * HOUR, hours=B + 2 * HOUR, now=B + 2 * HOUR)
    return Site.objects.get(pk=demo.pk)


def test_the_reports_figures_are_the_ledgers_for_the_week(week: Site) -> None:
    report = weekly_report(week.pk, YEAR, WEEK)
    led = ledger(Window(week.pk, A, B, "1h"))
    assert report.week == "2026-W10" and (report.a, report.b) == (A, B)
    assert report.states == {s: line.gpu_hours for s, line in led.states.items()}
    assert report.states[r.BUSY] == HOURS and report.states[r.ALLOCATED_IDLE] == HOURS
    assert report.kwh == pytest.approx(led.total_kwh)
    assert (report.cost, report.carbon_kg) == (led.price.cost, led.price.carbon_kg)
    teams = {t.team: t for t in report.teams}
    assert list(teams) == ["ml-research", "physics", POOL]  # most energy first, the pool last
    jobs = {j.key: j for j in led.jobs}
    train, empty = jobs["ml-research/train-0"], jobs["1001"]
    assert teams["ml-research"].kwh == pytest.approx(train.total.energy.total_kwh)
    assert teams["ml-research"].cost == pytest.approx(train.price.cost)
    assert teams["physics"].carbon_kg == pytest.approx(empty.price.carbon_kg)
    assert sum(t.kwh for t in report.teams) == pytest.approx(led.total_kwh)
    [idle] = report.top_idle
    assert (idle.team, idle.user, idle.workload) == ("physics", "bob", "job 1001")
    assert idle.idle_hours == HOURS
    # its GPU's 70 W and its node's other 800 W (one GPU a node), PUE 1.4, for 6 hours
    assert idle.idle_kwh == pytest.approx((70 + NODE_OTHER_W) * PUE * HOURS / 1000)


def test_the_message_goes_once_to_the_sites_route_with_the_download(
    week: Site, settings: Any
) -> None:
    settings.FLEETWATCH_BASE_URL = "https://fleet.example"
    with SlackReceiver() as slack:
        Route.objects.create(name="demo", webhook_url=slack.url("/demo"), site=week)
        after = B + 2 * HOUR  # Monday 02:00 UTC after the week
        queued: list[int] = []
        assert len(send_weekly_reports(after, queued.append)) == 1  # North had no GPU time
        assert send_weekly_reports(after + HOUR, queued.append) == []  # the next tick: sent
        deliver_all()
        [message] = slack.received("/demo")
    text = message.body["text"]
    assert text.startswith(
        "Demo datacentre, week 2026-W10: 12 of 336 GPU-hours held, 50 % of them idle; 19 kWh,"
        " 21.81 EUR, 6 kg CO2"
    )
    assert "physics/job 1001, 6.0 GPU-hours" in str(message.body)
    buttons = [e for b in message.body["blocks"] for e in b.get("elements", []) if "url" in e]
    assert [(b["text"]["text"], b["url"]) for b in buttons] == [
        (
            "Download",
            f"https://fleet.example/reports/weekly/?site={week.pk}&week=2026-W10&format=csv",
        )
    ]


def test_the_beat_looks_for_it_hourly_on_the_maintenance_queue() -> None:
    [entry] = [
        e
        for e in fleet_app.conf.beat_schedule.values()
        if e["task"] == "notifications.weekly_report"
    ]
    assert entry["options"]["expires"] < float(entry["schedule"])
    route = fleet_app.amqp.router.route({}, "notifications.weekly_report")
    assert route["queue"].name == MAINTENANCE


def test_the_download_is_the_reports_and_refused_to_a_viewer_of_another_site(
    week: Site,
) -> None:
    url = f"/reports/weekly/?site={week.pk}&week=2026-W10"
    viewer = signed_in(person("vic", north="viewer"))
    assert viewer.get(url).status_code == 404
    assert viewer.get(url + "&format=csv").status_code == 404
    operator = signed_in(person("otto", demo="operator"))
    answer = operator.get(url + "&format=csv")
    assert answer["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(answer.content.decode())))
    by_team = {row["team"]: row for row in rows if row["section"] == "team"}
    report = weekly_report(week.pk, YEAR, WEEK)
    assert by_team["physics"]["allocated_idle_gpu_hours"] == "6.00"
    assert by_team["ml-research"]["kwh"] == f"{report.teams[0].kwh:.3f}"
    assert [row["workload"] for row in rows if row["section"] == "idle"] == ["job 1001"]
    page = operator.get(url).content.decode()
    assert "Weekly report: Demo datacentre, 2026-W10" in page and "job 1001" in page
    assert operator.get(f"/reports/weekly/?site={week.pk}&week=2999-W01").status_code == 404
