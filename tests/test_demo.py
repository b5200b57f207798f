"""The demo: a physically plausible site (`fleet/demo.py`) whose headline fault reads as a
story, and `make demo`: it starts everything, data flows, Ctrl-C stops it all, it can run
again."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from agents.protocol import reasons
from fleet.choices import RackCoolingChoices
from fleet.demo import (
    DEMO_LOOPS,
    DEMO_RACKS,
    GB200,
    RACK_UNITS,
    RackPlan,
    feed_kw,
    feed_warnings,
    seed_demo_site,
)
from fleet.ingest.enrollment import inventory_for_site
from fleet.models import GPU, Node, PowerFeed, Rack, Site
from fleetsim.collectors import VirtualCduCollector
from fleetsim.faults import FaultPlan, parse_fault
from fleetsim.fleet import SiteModel
from fleetsim.inventory import parse_inventory
from fleetsim.physics import server_for, spec_for
from fleetsim.plant import LIQUID_SHARE
from fleetsim.runner import SimSettings, Simulator
from tests.support.server import ROOT, free_port
from tests.support.stored_samples import count_samples
from tests.support.stub_server import ENROLL_TOKEN, StubBackend

CAPTURE = ROOT / "tests" / "data" / "nvml" / "h200" / "nvml_inventory.json"

# -- the site: physically plausible --------------------------------------------------------


NVL72_RACKS = [plan for plan in DEMO_RACKS if plan.gpu_model == GB200]


def _gpus(plans: list[RackPlan]) -> int:
    return sum(plan.nodes * plan.gpus_per_node for plan in plans)


def test_the_demo_is_656_gpus_over_three_halls_one_of_them_nvl72() -> None:
    hgx = [plan for plan in DEMO_RACKS if plan.hall in ("Hall A", "Hall B")]
    assert _gpus(hgx) == 512 and sum(plan.nodes for plan in hgx) == 64
    assert {plan.gpus_per_node for plan in hgx} == {8}
    assert Counter(plan.hall for plan in DEMO_RACKS) == {"Hall A": 8, "Hall B": 8, "Hall C": 2}
    assert [plan.name for plan in NVL72_RACKS] == ["C01", "C02"]
    for plan in NVL72_RACKS:  # 72 GPUs a rack, in 18 compute trays of 4
        assert (plan.nodes, plan.gpus_per_node, plan.hall) == (18, 4, "Hall C")
    assert _gpus(list(DEMO_RACKS)) == 656
    liquid = [p.name for p in DEMO_RACKS if p.loop == "CDU-1"]
    assert liquid == ["A01", "A02"] and DEMO_RACKS[3].loop is None  # tests rely on the order


def test_every_demo_server_fits_its_rack_and_no_two_share_a_unit() -> None:
    for plan in DEMO_RACKS:
        units = [
            u
            for n in range(1, plan.nodes + 1)
            for u in range(plan.server_unit(n), plan.server_unit(n) + plan.server_units)
        ]
        assert len(units) == len(set(units)), f"{plan.name}: servers overlap"
        assert min(units) >= 1 and max(units) <= RACK_UNITS, f"{plan.name}: past U{RACK_UNITS}"


def test_every_demo_gpu_reports_the_memory_of_its_model() -> None:
    h200_bytes = json.loads(CAPTURE.read_text())["devices"][0]["memory_info"]["total"]
    memory = {plan.gpu_model: spec_for(plan.gpu_model).mem_total_mib for plan in DEMO_RACKS}
    assert memory == {
        "NVIDIA H200": h200_bytes / 2**20,
        "NVIDIA H100 80GB HBM3": 81559.0,
        "NVIDIA GB200": 189471.0,  # nvidia-smi's figure for the GB200's 186 GB
    }
    assert all(spec_for(model).model == model for model in memory)  # no model falls back


def test_each_feed_of_every_hgx_rack_alone_carries_the_rack_budget() -> None:
    for plan in DEMO_RACKS:
        if plan.feeds == 2:
            assert feed_kw(plan.feed_amps) >= plan.budget_kw, plan.name  # A or B can fail (2N)
    assert feed_warnings() == []


def test_an_nvl72_rack_has_at_least_three_feeds_and_survives_losing_any_one() -> None:
    for plan in NVL72_RACKS:
        assert plan.feeds >= 3
        one_kw = feed_kw(plan.feed_amps)
        assert one_kw * (plan.feeds - 1) >= plan.budget_kw  # N+1: any one can fail
        assert one_kw * (plan.feeds - 2) < plan.budget_kw  # ...and it is N+1, not 2N: a
        # second loss can trip the rack, so the rack page's N+1 lines mean something


def test_a_plan_whose_feeds_less_one_cannot_carry_the_budget_is_warned_about() -> None:
    short = replace(NVL72_RACKS[0], feed_amps=63)
    assert feed_warnings((short,)) == [
        "C01: 3 of its 4 63 A feeds carry 108.7 kW, under the 132 kW budget:"
        " losing one feed can trip the others"
    ]


def test_a_plan_whose_feeds_cannot_each_carry_the_budget_is_warned_about() -> None:
    dense = replace(DEMO_RACKS[0], budget_kw=130.0, feed_amps=125)
    assert feed_warnings((dense,)) == [
        "A01: one 125 A feed carries 71.9 kW, under the 130 kW budget:"
        " losing feed A or B can trip the other"
    ]


def _liquid_share(plan: RackPlan) -> float:
    """As the simulator splits a rack's heat: an NVL72 tray says its own share."""
    own = server_for(plan.gpu_model).liquid_share
    if plan.cooling == RackCoolingChoices.DIRECT_LIQUID and own is not None:
        return own
    return LIQUID_SHARE[str(plan.cooling)]


def test_each_cdu_is_sized_for_the_liquid_heat_of_its_racks() -> None:
    assert [_liquid_share(p) for p in NVL72_RACKS] == [0.85, 0.85]  # ~15 % leaves as air
    for loop in DEMO_LOOPS:
        racks = [p for p in DEMO_RACKS if p.loop == loop.name]
        heat_kw = sum(p.budget_kw * _liquid_share(p) for p in racks)
        assert heat_kw <= loop.capacity_kw <= 1.25 * heat_kw, loop.name
        assert loop.rated_flow_lpm == round(loop.capacity_kw / (4.186 * 10.0) * 60.0)


@pytest.mark.django_db
def test_the_seeded_demo_site_is_the_plan() -> None:
    site = seed_demo_site()
    seed_demo_site()  # idempotent
    assert GPU.objects.filter(node__rack__hall__site=site).count() == 656
    positions = set(Node.objects.filter(rack__name="A01").values_list("position", flat=True))
    assert positions == {1, 9, 17, 25}
    assert set(Node.objects.values_list("model", flat=True)) == {
        "HGX H200 8-GPU",
        "HGX H100 8-GPU",
        "GB200 NVL72 compute tray",
    }
    for tray in Node.objects.filter(rack__name="C02"):
        assert tray.gpus.count() == 4 and {g.model for g in tray.gpus.all()} == {"NVIDIA GB200"}
    for rack in Rack.objects.filter(hall__site=site):
        feeds = list(PowerFeed.objects.filter(rack=rack))
        smallest = min(feed.available_kw for feed in feeds)
        # losing any one feed leaves the budget carried (2N for A/B racks, N+1 for NVL72)
        assert sum(f.available_kw for f in feeds) - smallest >= rack.power_budget_kw, rack.name
    assert Counter(
        PowerFeed.objects.filter(rack__hall__name="Hall C").values_list("rack__name", flat=True)
    ) == {"C01": 4, "C02": 4}


# -- the headline fault: a CDU's pumps fail ------------------------------------------------


def _demo_model(site: Site, faults: list[str]) -> SiteModel:
    """The simulator on the seeded site, as `make demo` runs it, every node training flat out."""
    plan = FaultPlan([parse_fault(f) for f in faults])
    model = SiteModel(parse_inventory(inventory_for_site(site)), plan, seed=0)
    for node in model.nodes.values():
        node.workload.kind, node.workload.load, node.workload.remaining_s = "training", 1.0, 1e9
    return model


@pytest.mark.django_db
def test_cdu_pump_failure_reads_as_a_story_within_two_minutes() -> None:
    model = _demo_model(seed_demo_site(), ["cdu-pump-fail:CDU-1@60s+10m"])
    cooled = [g for rack in ("A01", "A02") for n in model.racks[rack].nodes for g in n.gpus]
    others = [g for n in model.nodes.values() if n.rack.loop != "CDU-1" for g in n.gpus]

    def rack_kw() -> float:
        return (model.racks["A01"].power_w + model.racks["A02"].power_w) / 1000

    def run_until(t_end: int, t_start: int) -> None:
        for t in range(t_start, t_end):
            model.step(1.0, float(t), wall=1_795_996_000.0 + t)

    run_until(61, 0)
    before_kw, before_pue, before_clock = (
        rack_kw(),
        model.total_power_w / model.it_power_w,
        cooled[0].clock_sm_mhz,
    )
    loop = next(
        s
        for s in VirtualCduCollector(model).collect(time.time()).samples["loop"]
        if s["loop"] == "CDU-1"
    )
    assert loop["pumps_failed"] == 3 and loop["flow_lpm"] == 0  # CDU-1 red at the next push
    run_until(60 + 90, 61)  # within a minute and a half: every GPU it cools is throttling
    assert all(g.reasons & reasons.SW_THERMAL_SLOWDOWN for g in cooled)
    assert max(g.clock_sm_mhz for g in cooled) < before_clock - 300
    run_until(60 + 150, 60 + 90)  # the lost kW and the PUE move
    assert rack_kw() < 0.5 * before_kw
    # A01/A02 are ~90 kW of a ~740 kW site (Hall C's NVL72s included): the fixed losses
    # share grows, and the PUE rises by ~0.007, a step at two decimals
    assert model.total_power_w / model.it_power_w > before_pue + 0.005
    assert not any(g.reasons & reasons.HARMFUL for g in others)  # nothing else is touched


# -- the NVL72 hall: 100 kW+ racks in the simulator ---------------------------------------


@pytest.mark.django_db
def test_an_nvl72_rack_at_full_load_draws_120_to_132_kw_and_its_cdu_takes_its_heat() -> None:
    model = _demo_model(seed_demo_site(), [])
    for t in range(300):
        model.step(1.0, float(t), wall=1_795_996_000.0 + t)
    c01, c02, cdu3 = model.racks["C01"], model.racks["C02"], model.loops["CDU-3"]
    for rack in (c01, c02):
        assert 120_000 <= rack.power_w <= 132_000, rack.rack.name
        assert len(rack.nodes) == 18 and {len(n.gpus) for n in rack.nodes} == {4}
        gpu = rack.nodes[0].gpus[0]
        assert 1150 <= gpu.power_avg_w <= 1200 and gpu.reasons & reasons.SW_POWER_CAP
        assert not gpu.reasons & reasons.HARMFUL  # its own CDU keeps it cool enough
        # ~85 % of the rack's heat goes to the water, the rest (and the switches') to the air
        assert 0.78 <= rack.liquid_heat_kw * 1000 / rack.power_w <= 0.86
    assert cdu3.racks == [c01, c02]
    assert cdu3.heat_kw == pytest.approx(c01.liquid_heat_kw + c02.liquid_heat_kw)
    assert cdu3.heat_kw > 200 and cdu3.heat_kw <= cdu3.loop.capacity_kw
    loop = next(
        s
        for s in VirtualCduCollector(model).collect(time.time()).samples["loop"]
        if s["loop"] == "CDU-3"
    )
    assert loop["heat_removed_kw"] == pytest.approx(cdu3.heat_kw, abs=0.1)
    assert model.loops["CDU-1"].heat_kw < 80  # the HGX racks' CDU carries none of it


@pytest.mark.django_db
def test_the_simulators_nvl72_trays_each_report_four_gb200s_through_the_agent_transport(
    tmp_path: Path,
) -> None:
    full = parse_inventory(inventory_for_site(seed_demo_site()))
    trays = tuple(node for node in full.nodes if node.rack == "C01")
    c01 = replace(full, nodes=trays).first_nodes(None)
    backend = StubBackend(site=inventory_for_site(Site.objects.get(slug="demo")))
    backend.start()
    try:
        settings = SimSettings(backend.url, ENROLL_TOKEN, tmp_path, interval_s=0.2, jobs=True)
        asyncio.run(Simulator(settings, c01, FaultPlan()).run(duration_s=1.0))
    finally:
        backend.stop()
    batches = [b for b in backend.store.batches if b["source"].startswith("node:")]
    assert {b["source"] for b in batches} == {f"node:{node.name}" for node in trays}
    assert len(trays) == 18
    for tray in trays:
        mine = [b for b in batches if b["source"] == f"node:{tray.name}"]
        info = next(b["gpu_info"] for b in mine if b.get("gpu_info"))
        assert [g["gpu"] for g in info] == [0, 1, 2, 3]
        assert {g["model"] for g in info} == {"NVIDIA GB200"}
        assert {g["limits"]["power_limit_max_w"] for g in info} == {1200.0}
        assert {s["gpu"] for b in mine for s in b.get("gpu", ())} == {0, 1, 2, 3}


def start_demo(var_dir: Path, port: int) -> tuple[subprocess.Popen[str], str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(
        {
            "FLEETWATCH_VAR_DIR": str(var_dir),
            "FLEETWATCH_PORT": str(port),
            "FLEETWATCH_DEMO_NODES": "8",
        }
    )
    # the demo must run on its own settings: its key, plain http, /metrics open
    for name in (
        "FLEETWATCH_TESTING",
        "SECRET_KEY",
        "FLEETWATCH_PLAIN_HTTP",
        "FLEETWATCH_SECRET_KEYS",
    ):
        env.pop(name, None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetwatch.demo"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    banner = ""
    deadline = time.monotonic() + 90
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        banner += line
        if "Ctrl-C stops everything" in line:
            return proc, banner
    proc.kill()
    raise AssertionError(f"the demo did not start:\n{banner}")


def gpu_rows(var_dir: Path) -> int:
    """GPU samples stored: raw rows and packed spans (the demo's beat packs sealed hours)."""
    with sqlite3.connect(var_dir / "fleetwatch.sqlite3") as conn:
        return count_samples(lambda sql, *params: list(conn.execute(sql, *params)), "gpu")


def processes_mentioning(text: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", text], capture_output=True, text=True, check=False)
    return [line for line in out.stdout.splitlines() if "pgrep" not in line]


def stop(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGINT)
    return proc.wait(60)


def test_demo_runs_everything_streams_data_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    var_dir = tmp_path / "var"
    port = free_port()
    proc, banner = start_demo(var_dir, port)
    try:
        assert f"http://127.0.0.1:{port}/" in banner
        assert "admin / " in banner and "fwe_demo_" in banner
        deadline = time.monotonic() + 30
        while gpu_rows(var_dir) == 0 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert gpu_rows(var_dir) > 0
        assert len(processes_mentioning(str(var_dir))) >= 2  # beat and simulator name var/
    finally:
        code = stop(proc)
    assert code == 0
    assert processes_mentioning(str(var_dir)) == []

    # Safe to run twice: same login, same token, the data kept.
    kept = gpu_rows(var_dir)
    again, second_banner = start_demo(var_dir, port)
    try:
        login = [line for line in banner.splitlines() if "admin / " in line]
        assert login and login[0] in second_banner
        assert gpu_rows(var_dir) >= kept
    finally:
        assert stop(again) == 0
