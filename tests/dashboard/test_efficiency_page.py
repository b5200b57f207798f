"""The efficiency page over the ledger's seeded site (tests/support/ledger_seed.py: a training
job, an allocation running nothing, bursty inference, a hung collective, a notebook holding
memory, a GPU shared by two teams' pods …): a viewer of the site sees each team's GPU-hours
by state, energy, cost and carbon as `ledger()` computes them, the empty allocation on the
reclaim list and the bursty inference off it, CSVs with the page's figures; a viewer of
another site sees none of it."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from django.test import Client

from dashboard import efficiency
from fleet.models import GpuAllocation, Site, Workload
from fleet.read import ledger_rules as r
from fleet.read.ledger import Line, ledger
from fleet.read.ledger_sql import Window
from fleet.words import STATE_WORDS, utc_minute
from tests.support import people
from tests.support.databases import T
from tests.support.ledger_seed import JOBS, Seed, kept, seed
from tests.support.pages import fold, text
from tests.support.roles import person, signed_in

pytestmark = pytest.mark.django_db
fast_passwords = people.fast_passwords  # autouse

END = T + 7200  # the seeded hours end here: "now" is half a minute later
NOW = END + 30.0
DAY = 86_400


@pytest.fixture
def seeded(monkeypatch: pytest.MonkeyPatch) -> Seed:
    monkeypatch.setattr(efficiency, "clock", lambda: NOW)
    s = seed("default", T, slug="s1", name="Site 1")
    Site.objects.create(slug="north", name="North")
    kept("default", minutes=END, hours=END, now=NOW)  # as the `fleet.ledger` task leaves it
    return s


def viewer_of_site_1() -> Client:
    return signed_in(person("sam", s1="viewer"))


def viewer_of_north() -> Client:
    return signed_in(person("vic", north="viewer"))


def f(value: float) -> str:
    return f"{value:,.2f}"


def team_of(name: str) -> str:
    return JOBS[name][4] or "physics"  # namespace, else the account every job has


def expected_team_rows(s: Seed) -> dict[str, str]:
    """Each team's row as the page should say it, from `ledger()` itself."""
    led = ledger(Window(s.site_id, END - DAY, END, "1m"))
    by_id = {wid: name for name, wid in s.names.items()}
    teams: dict[str, dict[str, Line]] = {}
    for job in led.jobs:
        states = teams.setdefault(team_of(by_id[job.workload_id]), {})
        for state, line in job.states.items():
            states[state] = states.get(state, Line()) + line
    rows = {}
    for team, states in teams.items():
        total = sum(states.values(), Line())
        kwh = total.energy.total_kwh
        hours = [f(states.get(state, Line()).gpu_hours) for state in r.HELD_STATES]
        cost = f(kwh * 0.2 + total.gpu_hours * 1.5)
        rows[team] = " ".join(
            [team, *hours, f(total.energy.it_kwh), f(total.energy.overhead_kwh), cost, "EUR",
             f(kwh * 300 / 1000)]
        )  # fmt: skip
    return rows


def reclaim_section(html: str) -> str:
    found = re.search(r"<caption>Reclaim list.*?</table>", html, re.S)
    assert found is not None
    return fold(found.group(0))


def test_each_team_has_the_gpu_hours_energy_cost_and_carbon_the_ledger_computes(
    seeded: Seed,
) -> None:
    page = text(viewer_of_site_1().get("/efficiency/"))
    rows = expected_team_rows(seeded)
    assert set(rows) == {"physics", "serving", "team-a", "team-b"}
    for row in rows.values():
        assert row in page
    # the hand-known figures behind them: 2 h 15 min of rows (the window reaches back past
    # the seeded hours' start) on 3 training GPUs, and the empty, hung and notebook ones
    assert rows["physics"].startswith("physics 6.75 2.25 2.25 2.25 ")
    # to the newest minute the stored ledger has: the rollups' last one
    assert f"last 24 h: {utc_minute(END - DAY)} – {utc_minute(END)}" in page


def test_the_empty_allocation_is_on_the_reclaim_list_and_bursty_inference_is_not(
    seeded: Seed,
) -> None:
    reclaim = reclaim_section(viewer_of_site_1().get("/efficiency/").content.decode())
    since = "2027-01-15 07:00 UTC"  # its interval opened an hour before the seeded rows
    assert f"Slurm job 1002 physics empty 1 of 1 {since} 2.25 " in reclaim
    for busy in ("serving/infer-0", "1001", "1004", "1000"):  # bursty, training, hung, memory
        assert busy not in reclaim


def test_a_job_idle_on_two_gpus_counts_each_gpu_once_mig_devices_and_all(seeded: Seed) -> None:
    empty = Workload.objects.get(pk=seeded.names["empty"])
    for case, mig in (("empty", "MIG-7f0c"), ("unallocated", "")):
        node_id, gpu = seeded.where[case]
        GpuAllocation.objects.create(
            site_id=seeded.site_id, node_id=node_id, gpu=gpu, mig=mig, workload=empty,
            source="scheduler", started=T - 3600.0, last_seen=NOW, ended=None,
        )  # fmt: skip
    reclaim = reclaim_section(viewer_of_site_1().get("/efficiency/").content.decode())
    assert "Slurm job 1002 physics empty 2 of 2 " in reclaim


def test_the_csvs_have_the_figures_the_page_shows(seeded: Seed) -> None:
    client = viewer_of_site_1()
    page = text(client.get("/efficiency/"))
    answer = client.get("/efficiency/?format=csv")
    assert answer["Content-Type"].startswith("text/csv")
    jobs = list(csv.DictReader(io.StringIO(answer.content.decode())))
    assert {row["key"] for row in jobs} == {JOBS[n][1] for n in JOBS if n != "infer-procs"}
    for row in jobs:
        hours = [row[f"{state}_gpu_h"] for state in r.HELD_STATES]
        figures = [*hours, row["energy_kwh"], row["facility_kwh"], row["cost"]]
        said = " ".join(f(float(v)) for v in figures)
        names = f"{row['kind']} {row['key']} {row['team']} {row['user']} {row['split']}"
        assert f"{names} {said} EUR {f(float(row['carbon_kg']))}" in page
    reclaim = client.get("/efficiency/?format=csv&table=reclaim").content.decode()
    (idle,) = csv.DictReader(io.StringIO(reclaim))
    assert (idle["key"], idle["team"], idle["user"], idle["gpus_held"]) == (
        "1002",
        "physics",
        "empty",
        "1",
    )
    idle_figures = (idle["idle_gpu_h"], idle["idle_energy_kwh"], idle["idle_facility_kwh"])
    assert f"{idle['since_utc']} {' '.join(idle_figures)}" in page


def test_the_chart_gets_gpu_hours_per_team_with_the_servers_state_names_and_colours(
    seeded: Seed,
) -> None:
    html = viewer_of_site_1().get("/efficiency/").content.decode()
    found = re.search(r'<script id="efficiency-data" type="application/json">(.*?)</script>', html)
    assert found is not None
    payload = json.loads(found.group(1))
    assert [s["name"] for s in payload["states"]] == [STATE_WORDS[s] for s in r.STATES]
    chart = payload["charts"][str(seeded.site_id)]
    at = chart["names"].index("physics")
    assert chart["hours"][r.BUSY][at] == 6.75
    assert chart["hours"][r.ALLOCATED_IDLE][at] == 2.25
    assert '<script src="/vendor/plotly.min.js"></script>' in html


def test_a_longer_window_says_which_thirty_days_it_covers(seeded: Seed) -> None:
    client = viewer_of_site_1()
    page = text(client.get("/efficiency/?window=30d"))
    assert f"last 30 d: {utc_minute(END - 30 * DAY)} – {utc_minute(END)}" in page
    assert client.get("/efficiency/?window=1y").status_code == 404


def test_a_viewer_of_another_site_sees_none_of_it(seeded: Seed) -> None:
    client = viewer_of_north()
    page = text(client.get("/efficiency/"))
    assert "North" in page
    assert "Site 1" not in page and "1002" not in page and "physics" not in page
    assert client.get(f"/efficiency/?site={seeded.site_id}").status_code == 404
    assert client.get(f"/efficiency/?site={seeded.site_id}&format=csv").status_code == 404
    for table in ("", "&table=reclaim"):
        listed = client.get(f"/efficiency/?format=csv{table}").content.decode()
        assert "Site 1" not in listed and "1002" not in listed


def test_the_efficiency_page_is_in_the_navigation(seeded: Seed) -> None:
    html = viewer_of_site_1().get("/capacity/").content.decode()
    assert '<a href="/efficiency/" >Efficiency</a>' in html


def test_a_site_the_ledger_has_not_stored_yet_says_so_instead_of_empty_figures(
    seeded: Seed,
) -> None:
    # North has no GPU rows: the ledger has kept nothing of it
    page = text(viewer_of_north().get("/efficiency/"))
    assert "no figures yet: the energy ledger stores a site's minutes" in page
    # Site 1 has: its window, not the note
    mine = text(viewer_of_site_1().get("/efficiency/"))
    assert "last 24 h:" in mine and "no figures yet" not in mine
