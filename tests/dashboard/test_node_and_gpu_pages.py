"""The node page, the GPU page and the history API through Django's test client: figures
with units, each GPU against its own limits, throttle reasons decoded, events listed,
stale figures as their age, refusals (login, unknown, not visible), plotly.js served."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from django.db import connection
from django.test import Client

from agents.protocol import reasons as nvml
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import GPU, Event, Node, Site, SourceToken
from fleet.storage.schema import raw_table
from tests.support import people
from tests.support.latest import store_latest as store
from tests.support.pages import text

pytestmark = pytest.mark.django_db


fast_passwords = people.fast_passwords  # autouse


@pytest.fixture
def site() -> Site:
    site = seed_demo_site("demo", (replace(DEMO_RACKS[0], nodes=1),), gpus_per_node=2)
    GPU.objects.update(slowdown_c=87.0, shutdown_c=92.0, gpu_max_c=85.0, power_limit_max_w=700.0)
    return site


ops = people.ops_signed_in


@pytest.fixture
def node(site: Site) -> Node:
    return Node.objects.get()


def gpu(node: Node, index: int) -> GPU:
    return GPU.objects.get(node=node, index=index)


def store_raw(node: Node, index: int, rows: list[tuple[float, float, float, int]]) -> None:
    """Samples straight into the raw tier: (ts, temperature °C, power W, clock-event mask)."""
    with connection.cursor() as cur:
        cur.executemany(
            f"INSERT INTO {raw_table('gpu')} (ts, node_id, gpu, temp_gpu_c, power_w,"
            " clock_event_reasons) VALUES (%s, %s, %s, %s, %s, %s)",
            [(ts, node.id, index, temp, power, mask) for ts, temp, power, mask in rows],
        )


# -- refusals ------------------------------------------------------------------------------


def test_pages_need_a_login_and_the_history_api_answers_401(node: Node) -> None:
    anonymous = Client()
    for url in (f"/nodes/{node.id}/", f"/gpus/{gpu(node, 0).pk}/", "/vendor/plotly.min.js"):
        response = anonymous.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]
    response = anonymous.get(f"/api/v1/history?kind=node&node_id={node.id}&metric=cpu_pct&range=1h")
    assert response.status_code == 401 and response.json()["error"]


def test_an_unknown_node_or_gpu_is_a_404(ops: Client) -> None:
    assert ops.get("/nodes/999999/").status_code == 404
    assert ops.get("/gpus/999999/").status_code == 404
    response = ops.get("/api/v1/history?kind=gpu&gpu_id=999999&metric=power_w&range=1h")
    assert response.status_code == 404


def test_a_node_on_a_site_the_user_may_not_see_is_a_404_everywhere(
    ops: Client, node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in ("dashboard.node", "dashboard.gpu", "dashboard.history"):
        monkeypatch.setattr(f"{module}.can_view_site", lambda user, site_id: False)
    assert ops.get(f"/nodes/{node.id}/").status_code == 404
    assert ops.get(f"/gpus/{gpu(node, 0).pk}/").status_code == 404
    url = f"/api/v1/history?kind=node&node_id={node.id}&metric=cpu_pct&range=1h"
    assert ops.get(url).status_code == 404


# -- node page -----------------------------------------------------------------------------


def test_node_page_shows_linked_gpu_tiles_host_figures_tuning_agent_and_clock(
    ops: Client, node: Node, site: Site
) -> None:
    now = time.time()
    store("gpu", (node.id, 0), now, temp_gpu_c=70.0, power_w=600.0)
    store(
        "gpu",
        (node.id, 1),
        now,
        temp_gpu_c=89.0,
        power_w=300.0,
        clock_event_reasons=nvml.HW_THERMAL_SLOWDOWN,
    )
    store(
        "node",
        (node.id,),
        now,
        cpu_pct=42.0,
        temp_inlet_c=24.5,
        power_w=9_800.0,
        mem_used_mib=524_288.0,
        mem_total_mib=2_097_152.0,
        net_rx_bytes_s=1.25e9,
    )
    Node.objects.filter(pk=node.pk).update(
        info={"agent_version": "1.4.2", "tuning": {"findings": ["transparent huge pages `always`"]}}
    )
    SourceToken.objects.create(
        source=node.source,
        kind="node",
        site=site,
        token_hash="f" * 64,
        agent_stats={"clock_offset_s": 1.25},
        last_seen=now - 2,
    )
    response = ops.get(f"/nodes/{node.id}/")
    html, page = response.content.decode(), text(response)
    assert f'href="/gpus/{gpu(node, 0).pk}/"' in html and f'href="/gpus/{gpu(node, 1).pk}/"' in html
    assert f'href="/racks/{node.rack_id}/"' in html and f'href="/#site-{site.id}"' in html
    assert "70 °C" in page and "17 °C to slowdown" in page and "600 W (86 % of cap)" in page
    assert "hw_thermal: hardware thermal slowdown (>=2x)" in page and "Critical" in page
    assert "CPU busy 42 %" in page and "Inlet air 24.5 °C" in page
    assert "Input power (node meter) 9,800 W" in page
    assert "Memory 512.0 of 2,048.0 GiB (25 %)" in page
    assert "Network receive 1,250.0 MB/s" in page
    assert "transparent huge pages `always`" in page
    assert "Agent 1.4.2 · protocol v1" in page and "⚠ 1.250 s behind" in page
    assert "Last heard 2 s ago" in page


def test_node_page_shows_a_quiet_node_by_its_age_not_its_old_numbers(
    ops: Client, node: Node
) -> None:
    then = time.time() - 600
    store("node", (node.id,), then, cpu_pct=42.0)
    store("gpu", (node.id, 0), then, temp_gpu_c=70.0, power_w=600.0)
    page = text(ops.get(f"/nodes/{node.id}/"))
    assert "No data" in page and "last data 10 min ago" in page
    assert "CPU busy no data for 10 min" in page and "42 %" not in page
    assert "70 °C" not in page
    assert "Not reported by the agent" in page and "Agent version not reported" in page
    assert "Clock offset not measured" in page


# -- GPU page ------------------------------------------------------------------------------


def test_gpu_page_shows_figures_against_the_gpus_own_limits_and_cap(
    ops: Client, node: Node
) -> None:
    now = time.time()
    store(
        "gpu",
        (node.id, 0),
        now,
        temp_gpu_c=80.0,
        power_w=650.0,
        power_limit_w=700.0,
        clock_sm_mhz=1755.0,
        clock_mem_mhz=2619.0,
        util_gpu_pct=97.0,
        util_mem_pct=40.0,
        mem_used_mib=61_440.0,
        mem_total_mib=81_920.0,
    )
    response = ops.get(f"/gpus/{gpu(node, 0).pk}/")
    page, html = text(response), response.content.decode()
    assert "GPU temperature 80 °C · slowdown 87 °C: 7 °C below" in page
    assert "shutdown 92 °C: 12 °C below" in page and "max operating 85 °C: 5 °C below" in page
    assert "Power 650 W · cap 700 W (93 % of it)" in page
    assert "SM clock 1755 MHz" in page and "Memory clock 2619 MHz" in page
    assert "GPU utilisation 97 %" in page and "Memory-controller utilisation 40 %" in page
    assert "Memory used 61,440 MiB · of 81,920 MiB (75 %)" in page
    assert "Warning" in page  # 7 °C of headroom
    assert f'href="/nodes/{node.id}/"' in html and f'href="/racks/{node.rack_id}/"' in html
    assert '"slowdown","value_c":87.0' in html  # the chart draws the limits as lines
    assert "/vendor/plotly.min.js?v=" in html


def test_gpu_page_shows_a_quiet_gpu_by_its_age(ops: Client, node: Node) -> None:
    store("gpu", (node.id, 1), time.time() - 45, temp_gpu_c=70.0, power_w=600.0)
    page = text(ops.get(f"/gpus/{gpu(node, 1).pk}/"))
    assert "No data" in page and "no data for 45 s" in page
    assert "GPU temperature no data for 45 s" in page and "70 °C" not in page
    assert "SM clock not reported" in page


def test_a_gpu_without_limits_shows_its_figures_and_says_why_it_is_not_judged(
    ops: Client, node: Node
) -> None:
    GPU.objects.update(slowdown_c=None, shutdown_c=None, gpu_max_c=None, power_limit_max_w=None)
    store("gpu", (node.id, 0), time.time(), temp_gpu_c=72.0, power_w=400.0)
    gpu_page = text(ops.get(f"/gpus/{gpu(node, 0).pk}/"))
    assert "GPU temperature 72 °C · limits unknown" in gpu_page
    assert "Power 400 W · cap unknown" in gpu_page
    assert "No data · not judged: no slowdown limit" in gpu_page
    node_page = text(ops.get(f"/nodes/{node.id}/"))
    assert "not judged: a GPU's headroom to its own slowdown limit is unknown" in node_page


def test_a_gpu_and_node_that_never_reported_say_so_instead_of_failing(
    ops: Client, node: Node
) -> None:
    gpu_page = text(ops.get(f"/gpus/{gpu(node, 1).pk}/"))
    assert "No data · no data yet" in gpu_page and "GPU temperature not reported" in gpu_page
    assert "No clock-event reasons recorded" in gpu_page and "No events from this GPU" in gpu_page
    node_page = text(ops.get(f"/nodes/{node.id}/"))
    assert "No data · last data never" in node_page and "Last heard never" in node_page
    assert "The host has not reported any figures" in node_page


def test_gpu_page_decodes_throttle_reasons_over_the_range_and_lists_its_events(
    ops: Client, node: Node
) -> None:
    now = time.time()
    calm = [(now - 1200 + t, 60.0, 400.0, 0) for t in range(0, 600, 10)]
    hot = [(now - 600 + t, 88.0, 350.0, nvml.HW_THERMAL_SLOWDOWN) for t in range(0, 300, 10)]
    store_raw(node, 0, calm + hot)
    Event.objects.create(
        source=node.source,
        seq=1,
        pos=0,
        ts=now - 100,
        node=node,
        gpu_index=0,
        kind="xid",
        code=79,
        detail="GPU has fallen off the bus",
    )
    Event.objects.create(
        source=node.source,
        seq=2,
        pos=0,
        ts=now - 50,
        node=node,
        gpu_index=1,
        kind="ecc_dbe",
        code=1,
        detail="not this GPU",
    )
    page = text(ops.get(f"/gpus/{gpu(node, 0).pk}/"))
    assert "throttling hw_thermal: hardware thermal slowdown (>=2x)" in page
    assert "no reason: full clocks" in page
    assert "xid 79 GPU has fallen off the bus" in page and "not this GPU" not in page
    node_page = text(ops.get(f"/nodes/{node.id}/"))
    assert "GPU 0 xid 79 GPU has fallen off the bus" in node_page
    assert "GPU 1 ecc_dbe 1 not this GPU" in node_page


def test_gpu_page_range_picks_the_charts_and_timeline_range(ops: Client, node: Node) -> None:
    url = f"/gpus/{gpu(node, 0).pk}/"
    response = ops.get(url + "?range=7d")
    week = response.content.decode()
    assert '"range":"7d"' in week and "Clock-event reasons last 7d" in text(response)
    assert 'href="?range=7d" data-range="7d" aria-current="true"' in week
    assert '"range":"1h"' in ops.get(url + "?range=1y").content.decode()  # unknown: the default


# -- history API ---------------------------------------------------------------------------


def test_history_api_answers_a_gpu_by_its_inventory_id_with_decoded_reasons(
    ops: Client, node: Node
) -> None:
    now = time.time()
    times = [now - 300 + t for t in range(0, 300, 5)]
    store_raw(
        node, 0, [(ts, 70.0 + (ts - times[0]) / 100, 500.0, nvml.SW_POWER_CAP) for ts in times]
    )
    store_raw(node, 1, [(now - 300, 99.0, 999.0, 0)])
    url = (
        f"/api/v1/history?kind=gpu&gpu_id={gpu(node, 0).pk}"
        f"&metric=temp_gpu_c&metric=power_w&start={now - 600}&end={now}&max_points=100&reasons=1"
    )
    body = ops.get(url).json()
    assert body["tier"] == "raw" and body["key"] == {"node_id": node.id, "gpu": 0}
    temps = body["series"]["temp_gpu_c"]["points"]
    assert body["step_s"] == 7  # ten minutes in at most 100 points
    assert [t for t, _ in temps] == sorted({float(int(ts // 7) * 7) for ts in times})
    assert temps[0][1] == pytest.approx(70.0, abs=0.05) and max(v for _, v in temps) < 99.0
    assert {v for _, v in body["series"]["power_w"]["points"]} == {500.0}
    spans = body["reasons"]["spans"]
    assert spans and spans[0]["reasons"] == [
        "power_cap: clocks reduced to stay under the power limit"
    ]
    assert spans[0]["throttling"] is True


def test_history_api_reads_a_node_by_its_key_and_start_end(ops: Client, node: Node) -> None:
    now = time.time()
    url = (
        f"/api/v1/history?kind=node&node_id={node.id}&metric=cpu_pct"
        f"&start={now - 86400}&end={now}&max_points=100"
    )
    body = ops.get(url).json()
    assert (
        body["tier"] == "1m" and body["step_s"] >= 60 and body["series"]["cpu_pct"]["points"] == []
    )


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("kind=pdu&node_id={n}&metric=power_w&range=1h", "kind"),
        ("kind=node&node_id={n}&metric=watts&range=1h", "metric"),
        ("kind=node&node_id={n}&range=1h", "metric"),
        ("kind=node&node_id={n}&metric=cpu_pct&range=2y", "range"),
        ("kind=node&node_id={n}&metric=cpu_pct", "start"),
        ("kind=node&node_id={n}&metric=cpu_pct&start=200&end=100", "start"),
        ("kind=node&node_id={n}&metric=cpu_pct&start=yesterday", "start"),
        ("kind=node&node_id={n}&metric=cpu_pct&start=0&end=1e10", "range"),
        ("kind=node&node_id=x&metric=cpu_pct&range=1h", "node_id"),
        ("kind=gpu&node_id={n}&metric=power_w&range=1h", "gpu"),
        ("kind=node&node_id={n}&metric=cpu_pct&range=1h&max_points=1", "max_points"),
    ],
)
def test_history_api_refuses_bad_input_naming_the_field(
    ops: Client, node: Node, query: str, field: str
) -> None:
    response = ops.get("/api/v1/history?" + query.format(n=node.id))
    assert response.status_code == 400
    body = response.json()
    assert body["field"] == field and body["error"].startswith(f"{field}: ") and body["reason"]


def test_plotly_js_is_served_from_the_installed_package_with_a_long_cache(ops: Client) -> None:
    response = ops.get("/vendor/plotly.min.js")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/javascript")
    assert "max-age=31536000" in response["Cache-Control"]
    head = b"".join(response.streaming_content)[:2000]  # type: ignore[attr-defined]
    assert b"plotly.js" in head


def test_the_gpu_page_says_where_its_figures_come_from(ops: Client, node: Node) -> None:
    """Its agent while that reports; the Prometheus source that pulls it when the agent is
    quiet (the pull skips nodes whose agent reports)."""
    from fleet.models import SourceToken, hash_token
    from fleet.models.prometheus import PrometheusSource, PulledGPU

    target = gpu(node, 0)
    token = SourceToken.objects.create(
        source=node.source,
        kind="node",
        site=node.rack.hall.site,
        token_hash=hash_token("fws_x"),
        last_seen=time.time(),
    )
    page = ops.get(f"/gpus/{target.pk}/").content.decode()
    assert "Figures from its node&#x27;s agent (fleet-agent)." in page
    prom = PrometheusSource.objects.create(
        name="dc1-prom", site=node.rack.hall.site, url="http://prom.example:9090"
    )
    PulledGPU.objects.create(source=prom, gpu=target, first_pulled=1.0, last_pulled=2.0)
    SourceToken.objects.filter(pk=token.pk).update(last_seen=time.time() - 300)
    page = ops.get(f"/gpus/{target.pk}/").content.decode()
    assert "via Prometheus (dc1-prom: dcgm-exporter series)" in page


def lost_event(node: Node, index: int, kind: str, at: float, code: int | None = None) -> None:
    Event.objects.create(
        source=node.source,
        seq=Event.objects.count(),
        pos=0,
        ts=at,
        node=node,
        gpu_index=index,
        kind=kind,
        code=code,
    )


def test_a_lost_gpu_says_since_when_and_why_in_its_sites_time_zone(
    ops: Client, node: Node, site: Site
) -> None:
    import datetime as dt
    import zoneinfo

    Site.objects.filter(pk=site.pk).update(timezone="Europe/Berlin")
    now = time.time()
    store("gpu", (node.id, 0), now, temp_gpu_c=60.0)  # its node reports
    store("gpu", (node.id, 1), now - 120, temp_gpu_c=90.0)  # GPU 1 stopped two minutes ago
    lost_event(node, 1, "xid", now - 3600, code=79)  # an earlier fall, before its last sample

    def clock(ts: float) -> str:
        return dt.datetime.fromtimestamp(ts, zoneinfo.ZoneInfo("Europe/Berlin")).strftime(
            "%H:%M %Z"
        )

    page = text(ops.get(f"/gpus/{gpu(node, 1).pk}/"))
    assert f"Critical · lost: missing from its node since {clock(now - 120)}" in page
    assert "90 °C" not in page.split("History")[0]  # never its last figure as if live
    lost_event(node, 1, "gpu_lost", now - 100)
    page = text(ops.get(f"/gpus/{gpu(node, 1).pk}/"))
    assert f"lost: off the bus since {clock(now - 100)} (reported lost by its agent)" in page
    lost_event(node, 1, "xid", now - 100, code=79)
    page = text(ops.get(f"/gpus/{gpu(node, 1).pk}/"))
    assert f"lost: off the bus since {clock(now - 100)} (XID 79)" in page
    node_page = ops.get(f"/nodes/{node.id}/")
    assert "1 GPU lost" in text(node_page) and 'data-lost="1"' in node_page.content.decode()
    healthy = text(ops.get(f"/gpus/{gpu(node, 0).pk}/"))
    assert "lost:" not in healthy
