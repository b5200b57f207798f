"""The headline scenario, end to end: a CDU's pumps fail, the racks it cools heat up
until their GPUs slow down, the pumps come back and everything recovers. Slack should
hear about it as ONE incident for the loop — one firing message naming the loop and
the racks it cools, an update or two as its GPUs reach their limit and slow down, and one
resolved message — not one message per rule, rack and GPU.

Everything is real: the backend (uvicorn), a Celery worker (`-Q celery,rules`, not
eager) and beat (alert evaluation every EVAL_S), the simulator sending through the
agent code and its simulated Redfish CDU, and a local receiver answering like Slack.

The site: A01 and A02 (direct liquid, 2 nodes of 8 H200 each) on CDU-1, A03 (immersion,
1 node) on CDU-2. Two nodes make too little heat to reach thermal slowdown in minutes
(a rack's water warms at Q / (25 kg · c_p) with the pumps stopped: ~0.1 °C/s for 16 kW),
so `rack-overload` with factor 0.85 keeps every rack flat out at 85 % of its budget
(under the 90 % rack-power rule; A03's load also keeps CDU-2's ΔT above the 1 °C
ΔT-collapse rule): with CDU-1's pumps stopped the water in A01/A02 levels off near 85 °C
(the hosts' heat leaves it above 70 °C), the first thermal alert (headroom critical) fires
~86 s after the fault and hardware thermal slowdown ~150 s (measured once on the 2-core
VM; agents/sim/fleet.py, physics.py; 40 s cold-plate lag). The GPUs slow down but stay
on the bus (tests/agents/test_sim_physics.py guards that).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.slack_receiver import Received, SlackReceiver
from tests.support.stack import Instance, RackSpec, Stack

pytestmark = pytest.mark.timeout(600)

LOOP = "CDU-1"
LOOP_RACKS = ("A01", "A02")  # what CDU-1 cools
OTHER_RACK = "A03"  # on CDU-2: must not appear in CDU-1's incident
RACKS = (
    RackSpec("A01", "direct_liquid", 2, LOOP),
    RackSpec("A02", "direct_liquid", 2, LOOP),
    RackSpec("A03", "immersion", 1, "CDU-2", budget_kw=80, feed_amps=100),
)
NODES = sum(r.nodes for r in RACKS)

EVAL_S = 2.0  # FLEETWATCH_ALERT_EVAL_S: the beat interval of alerts.evaluate
FACILITY_S = 1.0  # the simulator's device poll (--facility-interval): loop data latency
FAULT_AT_S = 15.0  # simulator time of the pump failure
# The GPUs' thermal bits flicker from ~70 s after the pumps stop and hold from ~100 s;
# the 30 s HW-thermal rule fires ~130 s in: the pumps stay off past that, so the GPU
# alerts fire while the loop's incident is open.
PUMPS_OFF_S = 150.0
DELIVERY_ALLOWANCE_S = 4.0  # queue → worker → POST
# After the pumps restart, for every alert to resolve and every message to arrive: about
# 60 s when Slack hears of one incident; a storm of ~200 per-GPU messages drains through
# the 1-per-second webhook limit for over 3 minutes, and is cut off here.
RECOVERY_TIMEOUT_S = 200.0
QUIET_S = 3 * EVAL_S + DELIVERY_ALLOWANCE_S  # after the last resolve: nothing more comes
PATH = "/alerts"

FAULTS = [
    f"cdu-pump-fail:{LOOP}@{FAULT_AT_S:g}s+{PUMPS_OFF_S:g}s",
    # Load, not a fault: every rack flat out at 85 % of its budget (see the module doc).
    *(f"rack-overload:{rack.name},factor=0.85" for rack in RACKS),
]
# The loop's rules that a pump failure breaches (docs/rules.md): one incident.
LOOP_RULES = ("loop-no-pump-running", "loop-flow-stopped", "loop-pump-failed", "loop-flow-collapse")
GPU_THERMAL_RULES = (
    "gpu-hw-thermal-slowdown",
    "gpu-sw-thermal-slowdown",
    "gpu-headroom-critical",
    "gpu-headroom-low",
)


# -- what Slack received ----------------------------------------------------------------


def text_of(message: Received) -> str:
    return str(message.body.get("text", ""))


def is_firing(message: Received) -> bool:
    return text_of(message).startswith(("CRITICAL:", "WARNING:", "INFO:"))


def is_resolved(message: Received) -> bool:
    return text_of(message).startswith("Resolved:")


def is_update(message: Received) -> bool:
    return text_of(message).startswith("Update") or "update" in text_of(message).lower()


def names_loop(message: Received) -> bool:
    return LOOP in text_of(message)


@dataclass
class Scenario:
    """What one run of the scenario produced (the fixture runs it once per tier)."""

    tier: str
    fault_start: float  # wall time the pumps stopped (simulator's first tick + FAULT_AT_S)
    fault_end: float
    first_pump_sample: float | None  # the first stored CDU-1 sample with a failed pump
    messages: list[Received]
    instances: list[Instance]
    firing_deadline_s: float  # after fault_start
    loop_for_s: float
    runtime_s: float
    finished_at: float
    notes: list[str] = field(default_factory=list)

    def rel(self, t: float | None) -> str:
        return "—" if t is None else f"{t - self.fault_start:+7.1f}s"

    def timeline(self) -> str:
        lines = [
            f"[{self.tier}] times relative to the fault start (pumps stop); the pumps restart"
            f" at {self.rel(self.fault_end)}; firing deadline +{self.firing_deadline_s:.1f}s"
            f" (loop for-duration {self.loop_for_s:g}s + eval {EVAL_S:g}s + data"
            f" {FACILITY_S:g}s + delivery {DELIVERY_ALLOWANCE_S:g}s); first stored failed-pump"
            f" sample {self.rel(self.first_pump_sample)}; scenario ran {self.runtime_s:.0f}s",
            f"Slack messages ({len(self.messages)}):",
            *(f"  {self.rel(m.at)}  [{m.status}] {text_of(m)}" for m in self.messages),
            f"Alert instances that fired or are pending ({len(self.fired_any())}"
            f" of {len(self.instances)}):",
            *(f"  {i.describe(self.fault_start)}" for i in self.fired_any()),
            "Pending instances dropped without firing (rule: count, first started):",
            *(
                f"  {rule}: {len(group)}, {self.rel(min(i.started_at or 0 for i in group))}"
                for rule, group in self.dropped_by_rule().items()
            ),
            *self.notes,
        ]
        return "\n".join(lines)

    def fired_any(self) -> list[Instance]:
        return [i for i in self.instances if i.fired_at is not None or i.state == "pending"]

    def dropped_by_rule(self) -> dict[str, list[Instance]]:
        groups: dict[str, list[Instance]] = {}
        for i in self.instances:
            if i.fired_at is None and i.state == "resolved":
                groups.setdefault(i.rule, []).append(i)
        return groups

    def loop_firing(self) -> list[Received]:
        return [m for m in self.messages if is_firing(m) and names_loop(m) and not is_update(m)]

    def loop_updates(self) -> list[Received]:
        return [m for m in self.messages if names_loop(m) and is_update(m)]

    def firing_elsewhere(self) -> list[Received]:
        return [m for m in self.messages if is_firing(m) and not names_loop(m)]

    def resolved(self) -> list[Received]:
        return [m for m in self.messages if is_resolved(m)]

    def fired(self, rules: tuple[str, ...], racks: tuple[str, ...] | None = None) -> list[Instance]:
        return [
            i
            for i in self.instances
            if i.rule in rules and i.fired_at is not None and (racks is None or i.rack in racks)
        ]


# -- running it -------------------------------------------------------------------------


def _wait_for_recovery(stack: Stack, slack: SlackReceiver, fault_end: float) -> None:
    """After the pumps restart: until no instance is pending or firing, no Slack delivery
    is queued, and nothing has arrived for QUIET_S (or RECOVERY_TIMEOUT_S has passed)."""
    while True:
        stack.check_alive()
        now = time.time()
        if now > fault_end + RECOVERY_TIMEOUT_S:
            return
        if now > fault_end + EVAL_S:
            active = [i for i in stack.alert_instances() if i.state in ("pending", "firing")]
            last = max((m.at for m in slack.received(PATH)), default=0.0)
            if not active and not stack.deliveries_in_flight() and now - last > QUIET_S:
                return
        time.sleep(1.0)


def run_scenario(tier: str, var_dir: Path) -> Scenario:
    began = time.time()
    with (
        SlackReceiver() as slack,
        Stack.started(
            var_dir,
            tier,
            racks=RACKS,
            faults=FAULTS,
            slack_url=slack.url(PATH),
            slack_min_severity="info",
            eval_s=EVAL_S,
            facility_interval_s=FACILITY_S,
        ) as stack,
    ):
        first_tick = stack.wait_for_agents(NODES)
        fault_start = first_tick + FAULT_AT_S
        fault_end = fault_start + PUMPS_OFF_S
        loop_for_s = min(stack.rule_for_s(k) for k in ("loop-no-pump-running", "loop-flow-stopped"))
        while time.time() < fault_end:
            stack.check_alive()
            time.sleep(1.0)
        _wait_for_recovery(stack, slack, fault_end)
        stack.check_alive()
        rows = stack.server.query("SELECT min(ts) FROM fw_loop_raw WHERE pumps_failed >= 1")
        first_pump = float(rows[0][0]) if rows and rows[0][0] is not None else None
        in_flight = stack.deliveries_in_flight()
        notes = [f"Slack deliveries still queued at the end: {in_flight}"] if in_flight else []
        notes += [
            f"the worker exited (code {code}) at {at - fault_start:+.1f}s and was restarted:"
            f" {[line for line in tail.splitlines() if 'Error' in line][-1:]}"
            for at, code, tail in stack.worker_crashes
        ]
        return Scenario(
            tier=tier,
            fault_start=fault_start,
            fault_end=fault_end,
            first_pump_sample=first_pump,
            messages=sorted(slack.received(PATH), key=lambda m: m.at),
            instances=stack.alert_instances(),
            firing_deadline_s=loop_for_s + EVAL_S + FACILITY_S + DELIVERY_ALLOWANCE_S,
            loop_for_s=loop_for_s,
            runtime_s=time.time() - began,
            finished_at=time.time(),
            notes=notes,
        )


@pytest.fixture(scope="module")
def scenario(tier: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    result = run_scenario(tier, tmp_path_factory.mktemp(f"cdu-{tier}"))
    print("\n" + result.timeline())  # shown with -s, and in the report of a failure
    yield result


# -- the harness did what the scenario needs (these must pass today) -------------------


def test_pump_failure_fires_the_loop_and_gpu_thermal_alerts_then_all_resolve(
    scenario: Scenario,
) -> None:
    story = scenario.timeline()
    loop_fired = scenario.fired(LOOP_RULES)
    assert loop_fired, f"no loop rule fired for {LOOP}\n{story}"
    gpu_fired = scenario.fired(GPU_THERMAL_RULES, LOOP_RACKS)
    assert gpu_fired, f"no GPU thermal alert fired in {LOOP_RACKS}\n{story}"
    assert not scenario.fired(GPU_THERMAL_RULES, (OTHER_RACK,)), story
    still = [i for i in scenario.instances if i.state in ("pending", "firing")]
    assert not still, f"still active after recovery: {still}\n{story}"
    assert scenario.messages, f"Slack received nothing\n{story}"
    assert all(m.status == 200 for m in scenario.messages), story


# -- what Slack should hear: one incident (the grouping under the loop) -----------------


def test_one_firing_message_for_the_loop_naming_its_racks_in_time(scenario: Scenario) -> None:
    story = scenario.timeline()
    firing = scenario.loop_firing()
    assert len(firing) == 1, f"{len(firing)} firing messages about {LOOP}, want 1\n{story}"
    message = firing[0]
    after = message.at - scenario.fault_start
    assert after <= scenario.firing_deadline_s, (
        f"the loop's message came {after:.1f}s after the pumps stopped,"
        f" deadline {scenario.firing_deadline_s:.1f}s\n{story}"
    )
    text = text_of(message)
    missing = [rack for rack in LOOP_RACKS if rack not in text]
    assert not missing, f"the loop's message does not name racks {missing}: {text!r}\n{story}"
    assert OTHER_RACK not in text, f"{OTHER_RACK} is on another loop: {text!r}\n{story}"


def test_gpu_thermal_alerts_are_grouped_under_the_loop(scenario: Scenario) -> None:
    story = scenario.timeline()
    elsewhere = scenario.firing_elsewhere()
    assert not elsewhere, (
        f"{len(elsewhere)} firing messages not about {LOOP} (per-rack/per-GPU alerts should"
        f" be grouped under the loop)\n{story}"
    )
    # An update when the GPUs it cools reach their limit, another at most when more of
    # them (or worse: slowdown) follow — never more than one per group interval.
    updates = scenario.loop_updates()
    assert 1 <= len(updates) <= 2, f"{len(updates)} updates about {LOOP}, want 1–2\n{story}"
    for update in updates:
        text = text_of(update)
        assert "→" in text and " GPU" in text, f"update says no symptom: {text!r}\n{story}"
    last = text_of(updates[-1])  # the first GPUs may be a straggler; the last says it all
    assert "GPUs in A01–A02" in last, f"the last update misses a rack: {last!r}\n{story}"


def test_one_resolved_message_for_the_loop_and_nothing_after(scenario: Scenario) -> None:
    story = scenario.timeline()
    resolved = scenario.resolved()
    assert len(resolved) == 1, f"{len(resolved)} resolved messages, want 1\n{story}"
    message = resolved[0]
    assert names_loop(message), f"the resolved message does not name {LOOP}\n{story}"
    assert message.at > scenario.fault_end, f"resolved before the pumps restarted\n{story}"
    later = [m for m in scenario.messages if m.at > message.at]
    assert not later, f"{len(later)} messages after the resolved one\n{story}"
