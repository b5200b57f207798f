"""The peer comparison's statement on both engines: each GPU's last hour of the 1m tier
(minutes with both a temperature and a power, their means, minutes slowed by heat or the
power brake but not by the power cap), read in one statement for a rack of 18 nodes × 4
GPUs, finds the one GPU running hot and the one slowed where its peers are not; the site's
record and the GPU page put the hot one on watch with the comparison."""

from __future__ import annotations

import random
from typing import Any

import pytest

from agents.protocol import reasons as nvml
from fleet.health import peers as hp
from fleet.health import record as hr
from fleet.models import GPU, Hall, Node, Rack, Site
from fleet.read.health_record import gpu_hours, gpu_record, site_records
from fleet.read.health_record_sql import peers_sql
from tests.support import databases
from tests.support.databases import T, TierDb
from tests.support.health_seed import minutes, site_with_gpus

tdb = databases.fresh_db_at_test_clock
COLUMNS = (
    "node_id", "gpu", "bucket", "n", "temp_gpu_c_mean", "power_w_mean",
    "clock_event_reasons_min", "clock_event_reasons_max", "clock_event_reasons_last",
)  # fmt: skip


def rack_of_72(db: TierDb) -> list[dict[str, Any]]:
    """18 nodes × 4 GB200s in one rack, as `fleet.read.health_record` identifies GPUs."""
    using = db.alias
    site = Site.objects.using(using).create(slug="s", name="S")
    hall = Hall.objects.using(using).create(site=site, name="H")
    rack = Rack.objects.using(using).create(
        hall=hall, name="R", cooling="liquid", power_budget_kw=130
    )
    gpus = []
    for n in range(18):
        node = Node.objects.using(using).create(name=f"n{n:02}", rack=rack)
        for i in range(4):
            GPU.objects.using(using).create(node=node, index=i, model="GB200")
            gpus.append(
                {"node_id": node.id, "index": i, "hall": "H", "rack": "R", "model": "GB200"}
            )
    return gpus


def test_one_statement_finds_the_hot_gpu_and_the_throttled_one_among_72_on_both_engines(
    tdb: TierDb,
) -> None:
    gpus = rack_of_72(tdb)
    hot, slowed = gpus[41], gpus[7]
    rng = random.Random(3)
    start = T - 3600
    rows = []
    for g in gpus:
        power = rng.uniform(650, 750)
        for m in range(60):
            temp = 30 + 0.04 * power + rng.gauss(0, 1.0) + (12.0 if g is hot else 0.0)
            mask = nvml.SW_POWER_CAP  # at its power limit, as a loaded GPU is: not counted
            if g is slowed and m < 20:
                mask |= nvml.HW_THERMAL_SLOWDOWN
            power_now = None if m == 0 else power  # one minute without power: not compared
            rows.append((g["node_id"], g["index"], start + 60 * m, 6, temp, power_now,
                         mask, mask, mask))  # fmt: skip
    # a minute after the hour read: outside it
    rows.append((hot["node_id"], hot["index"], T, 6, 99.0, 700.0, 0x40, 0x40, 0x40))
    tdb.insert("fw_gpu_1m", COLUMNS, rows)

    node_ids = sorted({g["node_id"] for g in gpus})
    got = tdb.execute(peers_sql(node_ids, start, T))
    assert len(got) == 72
    by_key = {(r[0], r[1]): r[2:] for r in got}
    minutes, _, _, known, throttled = by_key[(slowed["node_id"], slowed["index"])]
    assert (int(minutes), int(known), int(throttled)) == (59, 60, 20)

    found = hp.compare(gpu_hours(gpus, got))
    assert len(found) == 72
    assert [k for k, c in found.items() if c.hotter] == [(hot["node_id"], hot["index"])]
    assert [k for k, c in found.items() if c.throttling] == [(slowed["node_id"], slowed["index"])]
    c = found[(hot["node_id"], hot["index"])]
    assert 10.0 < c.hotter_by_c < 14.0  # the 12 °C it was made to run hotter
    assert 650 <= c.power_w <= 750
    assert tdb.execute(peers_sql([node_ids[-1] + 1], start, T)) == []


@pytest.mark.django_db
def test_the_site_record_and_the_gpu_page_put_the_hot_gpu_on_watch_with_the_comparison() -> None:
    place = site_with_gpus(nodes=3, per_node=4)  # 12 H100s in one rack
    hot = place.gpus[6]
    for g in place.gpus:
        temp = 75.0 if g is hot else 60.0 + 0.2 * g.index + 0.1 * (g.node_id % 3)
        minutes(
            g,
            [(T + 60 * m, {"temp_gpu_c_mean": temp, "power_w_mean": 680.0 + g.index,
                           "clock_event_reasons": 0}) for m in range(60)],
        )  # fmt: skip
    now = T + 3600 + 30  # the hour T..T+3600 is the last complete one
    records = {r.gpu_id: r for r in site_records(place.site.id, now)}
    assert [r.gpu_id for r in records.values() if r.state == hr.WATCH] == [hot.id]
    (e,) = records[hot.id].verdict.evidence
    assert e.criterion == "hotter than its peers"
    assert e.observed.startswith("75.0 °C against its peers' median 60.")
    assert "11 same-model GPUs in its rack" in e.observed
    page = gpu_record(hot.id, now)
    assert page is not None and page.verdict == records[hot.id].verdict
    # two hours on, the hour read has no minutes: no comparison, no evidence
    assert site_records(place.site.id, now + 2 * 3600)[0].state == hr.HEALTHY
