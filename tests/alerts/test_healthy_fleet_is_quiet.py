"""A healthy simulated fleet whose node, facility and Prometheus sources run at 1 s, 5 s and
15 s for three minutes sends nothing (issue 18: "no batch for 4 intervals" fired 10 s into
a healthy demo because every silent rule assumed a 1 s interval).

Everything is real: the backend (uvicorn), a Celery worker (not eager) and beat (alert
evaluation every EVAL_S, the Prometheus pull every FLEETWATCH_PROMETHEUS_PULL_S = 15 s),
the simulator sending through the agent code — its two virtual nodes every second, its
site's facility agent every 5 s from its simulated devices — a local HTTP server answering
the Prometheus query API for a third node that has no agent, and a local receiver answering
like Slack, routed every severity down to info.

One tier only: the services tier (PostgreSQL, Redis), the documented deployment. Three
minutes of a whole stack is the suite's slowest kind of test; the cadence logic it guards
is tier-independent (fleet/health/cadence.py) and the storage of each source's cadence is
tested on both tiers in tests/fleet/test_source_cadence_storage.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.fake_prometheus import FakePrometheus
from tests.support.slack_receiver import SlackReceiver
from tests.support.stack import RackSpec, Stack
from tests.support.stored_samples import sample_times
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.timeout(600), pytest.mark.services]

RACKS = (
    RackSpec("A01", "direct_liquid", 2, "CDU-1"),  # the simulator's two nodes, at 1 s
    RackSpec("A02", "air", 1, None),  # no agent: its GPUs come from Prometheus, at 15 s
)
SIM_NODES = 2
GPUS = 8
EVAL_S = 2.0
NODE_S, FACILITY_S, PULL_S = 1.0, 5.0, 15.0
HEALTHY_FOR_S = 180.0
PATH = "/alerts"
HEALTHY_GPU = {
    "DCGM_FI_DEV_GPU_TEMP": 55,
    "DCGM_FI_DEV_POWER_USAGE": 350.0,
    "DCGM_FI_DEV_GPU_UTIL": 60,
    "DCGM_FI_DEV_SM_CLOCK": 1755,
}


def _pulled_node(stack: Stack) -> str:
    rows = stack.server.query(
        "SELECT n.name FROM fleet_node n JOIN fleet_rack r ON r.id = n.rack_id WHERE r.name = ?",
        ("A02",),
    )
    return str(rows[0][0])


def _last_tick(stack: Stack) -> float:
    rows = stack.server.query("SELECT tick FROM alerts_alertevaluation WHERE id = 1")
    return float(rows[0][0]) if rows else 0.0


def _add_prometheus_source(stack: Stack, url: str) -> None:
    stack.server.manage(
        "shell",
        "-v",
        "0",
        "-c",
        "from fleet.models import PrometheusSource, Site\n"
        f"PrometheusSource.objects.create(name='dcgm', site=Site.objects.get(slug='demo'),"
        f" url={url!r})\n",
    )


def _story(stack: Stack, started: float, slack: SlackReceiver) -> str:
    fired = [i for i in stack.alert_instances() if i.fired_at is not None or i.state != "resolved"]
    return "\n".join(
        [
            f"Slack messages ({len(slack.received(PATH))}):",
            *(f"  {m.at - started:+7.1f}s {m.body.get('text', '')}" for m in slack.received(PATH)),
            f"alert instances that fired or are active ({len(fired)}):",
            *(f"  {i.describe(started)}" for i in fired),
        ]
    )


def test_a_healthy_fleet_at_1_5_and_15_s_sends_nothing_for_three_minutes(tmp_path: Path) -> None:
    with (
        SlackReceiver() as slack,
        FakePrometheus({}, HEALTHY_GPU, scrape_s=PULL_S) as prometheus,
        Stack.started(
            tmp_path,
            "services",
            racks=RACKS,
            faults=[],
            slack_url=slack.url(PATH),
            slack_min_severity="info",
            eval_s=EVAL_S,
            facility_interval_s=FACILITY_S,
            sim_args=["--nodes", str(SIM_NODES), "--interval", str(NODE_S)],
        ) as stack,
    ):
        prometheus.gpus = {_pulled_node(stack): GPUS}
        _add_prometheus_source(stack, prometheus.url)
        started = stack.wait_for_agents(SIM_NODES)
        deadline = started + HEALTHY_FOR_S
        while time.time() < deadline:  # the three minutes passing is what is under test
            stack.check_alive()
            time.sleep(1.0)
        # A message is a delivery row, committed with the evaluation that wrote it
        # (fleet/alerts/engine.py): once an evaluation after the window has committed,
        # no row means nothing was or will be sent for those three minutes.
        wait_until(
            lambda: _last_tick(stack) >= deadline,
            3 * EVAL_S + 30,
            "an alert evaluation after the three minutes",
            detail=stack.logs,
        )
        stack.check_alive()
        story = _story(stack, started, slack)
        [(deliveries,)] = stack.server.query("SELECT count(*) FROM notifications_delivery")
        assert deliveries == 0, f"a healthy fleet wrote {deliveries} Slack messages\n{story}"
        assert slack.received(PATH) == [], f"a healthy fleet sent Slack messages\n{story}"

        # The three cadences really ran, and each source is kept with its own.
        declared = dict(
            stack.server.query(
                "SELECT source, batch_interval_s FROM fleet_sourcetoken WHERE revoked = ?",
                (False,),
            )
        )
        assert declared.pop("site:demo") == FACILITY_S, story
        assert set(declared.values()) == {NODE_S} and len(declared) == SIM_NODES, declared
        [(pull_s,)] = stack.server.query("SELECT pull_interval_s FROM fleet_prometheussource")
        assert pull_s == PULL_S
        assert prometheus.pulls >= HEALTHY_FOR_S / PULL_S - 2, f"{prometheus.pulls} pulls"
        pulled = len(
            sample_times(
                stack.server.query,
                "gpu",
                "node_id = (SELECT id FROM fleet_node WHERE name = ?)",
                (_pulled_node(stack),),
            )
        )
        assert pulled >= HEALTHY_FOR_S / PULL_S - 2, f"{pulled} scrapes stored from Prometheus"
        site_batches = stack.server.query(
            # Within the window: the site goes on sending while the test waits for an
            # evaluation after it, longer on a loaded machine.
            "SELECT count(DISTINCT ts) FROM fw_facility_raw WHERE ts >= ? AND ts < ?",
            (started, deadline),
        )[0][0]
        assert site_batches <= HEALTHY_FOR_S / FACILITY_S + 2, "the site sent faster than 5 s"
