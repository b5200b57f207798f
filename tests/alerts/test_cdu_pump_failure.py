"""The headline scenario, end to end: a CDU's pumps fail, the racks it cools heat up until
their GPUs slow down and then fall off the bus (XID 79), the pumps come back while the
lost GPUs stay lost, and an operator resets them. Slack should hear ONE incident thread
for the loop: a firing message naming the loop and the racks it cools, updates as its
GPUs reach their limit, slow down and fall off the bus, "CDU-1 recovered after …; still
open: N GPUs off the bus in A01–A02 — reset needed" at once when the pumps are back, and
one resolved message (with the incident's summary) after the reset — nothing else, in
that order.

Everything is real: the backend (uvicorn), a Celery worker (`-Q celery,rules`, not
eager) and beat (alert evaluation every EVAL_S), the simulator sending through the
agent code and its simulated Redfish CDU, and a local receiver answering like Slack.

The site: A01 and A02 (direct liquid, 2 nodes of 8 H200 each, a 34 kW budget: ~6.5 kg of
water in each rack's circuit) on CDU-1, A03 (immersion, 1 node) on CDU-2. `rack-overload`
with factor 0.85 keeps every rack flat out at 85 % of its budget (under the 90 % rack-power
rule; A03's load also keeps CDU-2's ΔT above the 1 °C ΔT-collapse rule). With CDU-1's
pumps stopped the GPUs reach thermal slowdown ~120 s after the fault and trip at their
shutdown temperature from ~165 s (fleetsim/fleet.py, physics.py; tests/agents/
test_sim_reset.py guards that premise); the pumps restart at 240 s and every GPU of
CDU-1's racks is reset (the simulator's `gpu-reset` step) 30 s later, long before the
simulator's own reset 5 min after a trip.

One tier: the services tier (PostgreSQL, Redis), the documented deployment. Five minutes
of a whole stack is the suite's slowest kind of test; what it adds over the in-process
tests (tests/alerts/test_incidents.py, on the embedded tier: attribution, the recovered
message, superseding, the summary, the exactly-once claims) is the real processes and
physics, which do not depend on the tier.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.slack_receiver import Received, SlackReceiver
from tests.support.stack import Instance, RackSpec, Stack

pytestmark = [pytest.mark.timeout(600), pytest.mark.services]
TIER = "services"

LOOP = "CDU-1"
LOOP_RACKS = ("A01", "A02")  # what CDU-1 cools
OTHER_RACK = "A03"  # on CDU-2: must not appear in CDU-1's incident
RACKS = (
    RackSpec("A01", "direct_liquid", 2, LOOP, budget_kw=34),
    RackSpec("A02", "direct_liquid", 2, LOOP, budget_kw=34),
    RackSpec("A03", "immersion", 1, "CDU-2", budget_kw=80, feed_amps=100),
)
NODES = sum(r.nodes for r in RACKS)

EVAL_S = 2.0  # FLEETWATCH_ALERT_EVAL_S: the beat interval of alerts.evaluate
FACILITY_S = 1.0  # the simulator's device poll (--facility-interval): loop data latency
FAULT_AT_S = 15.0  # simulator time of the pump failure
# The GPUs slow down from ~120 s after the pumps stop and trip from ~165 s: the pumps stay
# off long enough for the trips to reach Slack as an update (a group interval after the
# slowdown's), and the lost GPUs are reset RESET_AFTER_S after the pumps restart — the
# recovered message comes in between.
PUMPS_OFF_S = 240.0
RESET_AFTER_S = 30.0
LOOP_NODES = tuple(
    f"gpu-{rack.name.lower()}-{n:02d}" for rack in RACKS if rack.loop == LOOP for n in (1, 2)
)
DELIVERY_ALLOWANCE_S = 4.0  # queue → worker → POST
# After the pumps restart, for every alert to resolve and every message to arrive: the
# reset, then ~20 s when Slack hears of one incident; a storm of per-GPU messages drains
# through the 1-per-second webhook limit for minutes, and is cut off here.
RECOVERY_TIMEOUT_S = 200.0
QUIET_S = 3 * EVAL_S + DELIVERY_ALLOWANCE_S  # after the last resolve: nothing more comes
PATH = "/alerts"

FAULTS = [
    f"cdu-pump-fail:{LOOP}@{FAULT_AT_S:g}s+{PUMPS_OFF_S:g}s",
    # Load, not a fault: every rack flat out at 85 % of its budget (see the module doc).
    *(f"rack-overload:{rack.name},factor=0.85" for rack in RACKS),
    # The operator resets every lost GPU of the loop's racks.
    *(f"gpu-reset:{node}@{FAULT_AT_S + PUMPS_OFF_S + RESET_AFTER_S:g}s" for node in LOOP_NODES),
]
# The loop's rules that a pump failure breaches (docs/rules.md): one incident.
LOOP_RULES = ("loop-no-pump-running", "loop-flow-stopped", "loop-pump-failed", "loop-flow-collapse")
OFF_THE_BUS_RULES = ("gpu-xid-fatal", "gpu-missing")
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


def is_recovered(message: Received) -> bool:
    return text_of(message).startswith(f"{LOOP} recovered after ")


def is_update(message: Received) -> bool:
    return text_of(message).startswith("Update") or "update" in text_of(message).lower()


def names_loop(message: Received) -> bool:
    return LOOP in text_of(message)


@dataclass
class Scenario:
    """What one run of the scenario produced."""

    tier: str
    fault_start: float  # wall time the pumps stopped (simulator's first tick + FAULT_AT_S)
    fault_end: float
    reset_at: float  # wall time the lost GPUs were reset
    superseded: int  # thermal and throttle instances ended "superseded: GPU lost"
    threads: list[str]  # the Slack deliveries' threads
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
            f" at {self.rel(self.fault_end)}, the GPUs are reset at {self.rel(self.reset_at)};"
            f" {self.superseded} instances superseded (GPU lost);"
            f" firing deadline +{self.firing_deadline_s:.1f}s"
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

    def recovered(self) -> list[Received]:
        return [m for m in self.messages if is_recovered(m)]

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
            # Quiet for QUIET_S: three more evaluations that wrote no message, and the
            # delivery allowance for one written at the last of them to arrive
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
        reset_at = fault_end + RESET_AFTER_S
        loop_for_s = min(stack.rule_for_s(k) for k in ("loop-no-pump-running", "loop-flow-stopped"))
        while time.time() < fault_end:  # the scenario's own time: the pumps are off
            stack.check_alive()
            time.sleep(1.0)
        _wait_for_recovery(stack, slack, fault_end)
        stack.check_alive()
        rows = stack.server.query("SELECT min(ts) FROM fw_loop_raw WHERE pumps_failed >= 1")
        first_pump = float(rows[0][0]) if rows and rows[0][0] is not None else None
        superseded = stack.server.query(
            "SELECT count(*) FROM alerts_alertinstance WHERE superseded_by = 'GPU lost'"
        )
        threads = stack.server.query("SELECT DISTINCT thread FROM notifications_delivery")
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
            reset_at=reset_at,
            superseded=int(superseded[0][0]),
            threads=sorted(str(row[0]) for row in threads),
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
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    result = run_scenario(TIER, tmp_path_factory.mktemp(f"cdu-{TIER}"))
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
    assert scenario.fired(OFF_THE_BUS_RULES, LOOP_RACKS), f"no GPU fell off the bus\n{story}"
    still = [i for i in scenario.instances if i.state in ("pending", "firing")]
    assert not still, f"still active after recovery: {still}\n{story}"
    assert scenario.messages, f"Slack received nothing\n{story}"
    assert all(m.status == 200 for m in scenario.messages), story


def test_a_lost_gpus_thermal_alerts_end_superseded_instead_of_firing_on_no_data(
    scenario: Scenario,
) -> None:
    assert scenario.superseded > 0, scenario.timeline()


# -- what Slack should hear: one incident thread, in order ------------------------------


def test_one_firing_message_for_the_loop_naming_its_racks_in_time(scenario: Scenario) -> None:
    story = scenario.timeline()
    firing = scenario.loop_firing()
    assert len(firing) == 1, f"{len(firing)} firing messages about {LOOP}, want 1\n{story}"
    message = firing[0]
    assert message is scenario.messages[0], f"the loop's message is not the first\n{story}"
    after = message.at - scenario.fault_start
    assert after <= scenario.firing_deadline_s, (
        f"the loop's message came {after:.1f}s after the pumps stopped,"
        f" deadline {scenario.firing_deadline_s:.1f}s\n{story}"
    )
    text = text_of(message)
    missing = [rack for rack in LOOP_RACKS if rack not in text]
    assert not missing, f"the loop's message does not name racks {missing}: {text!r}\n{story}"
    assert OTHER_RACK not in text, f"{OTHER_RACK} is on another loop: {text!r}\n{story}"


def test_thermal_alerts_and_gpus_off_the_bus_are_updates_of_the_loops_incident(
    scenario: Scenario,
) -> None:
    story = scenario.timeline()
    elsewhere = scenario.firing_elsewhere()
    assert not elsewhere, (
        f"{len(elsewhere)} firing messages not about {LOOP} (per-rack/per-GPU alerts and"
        f" GPUs off the bus should be in the loop's incident)\n{story}"
    )
    assert len(scenario.threads) == 1, f"deliveries in threads {scenario.threads}\n{story}"
    # The GPUs it cools reach their limit or slow down, then fall off the bus: at most one
    # update per group interval, the thermal ones first (when the first trips come within
    # a group interval of the slowdown, the off-the-bus update says it instead).
    updates = [text_of(m) for m in scenario.loop_updates()]
    assert 2 <= len(updates) <= 3, f"{len(updates)} updates about {LOOP}, want 2–3\n{story}"
    assert all("→" in text and " GPU" in text for text in updates), story
    thermal = [i for i, text in enumerate(updates) if "slowdown" in text]
    lost = [i for i, text in enumerate(updates) if "off the bus (XID 79) in A0" in text]
    assert thermal and lost and max(thermal) < min(lost), (
        f"want thermal updates, then an off-the-bus one: {updates}\n{story}"
    )
    # once GPUs are off the bus, every later update counts them (1–2 of them, as they trip)
    assert lost == list(range(min(lost), len(updates))), f"updates out of order\n{story}"


def test_the_pumps_coming_back_is_said_at_once_with_the_gpus_still_lost(
    scenario: Scenario,
) -> None:
    story = scenario.timeline()
    recovered = scenario.recovered()
    assert len(recovered) == 1, f"{len(recovered)} recovered messages, want 1\n{story}"
    message = recovered[0]
    text = text_of(message)
    assert scenario.fault_end < message.at < scenario.reset_at, story
    assert message.at - scenario.fault_end <= 3 * EVAL_S + FACILITY_S + DELIVERY_ALLOWANCE_S, (
        f"the recovery was said {message.at - scenario.fault_end:.1f}s after the pumps\n{story}"
    )
    assert "3 pumps running" in text and " L/min); still open: " in text, text
    assert " GPUs off the bus in A0" in text and "— reset needed" in text, text
    updates = scenario.loop_updates()
    assert updates and updates[-1].at < message.at, f"an update after the recovery\n{story}"


def test_one_resolved_message_after_the_reset_with_the_incidents_summary_and_nothing_after(
    scenario: Scenario,
) -> None:
    story = scenario.timeline()
    resolved = scenario.resolved()
    assert len(resolved) == 1, f"{len(resolved)} resolved messages, want 1\n{story}"
    message = resolved[0]
    assert names_loop(message), f"the resolved message does not name {LOOP}\n{story}"
    assert message.at > scenario.reset_at, f"resolved before the GPUs were reset\n{story}"
    body = json.dumps(message.body, ensure_ascii=False)
    assert "GPUs affected" in body and "GPU-hours lost" in body, body
    later = [m for m in scenario.messages if m.at > message.at]
    assert not later, f"{len(later)} messages after the resolved one\n{story}"
    kinds = [m for m in scenario.messages if not (is_update(m) or is_recovered(m))]
    assert kinds == [scenario.loop_firing()[0], message], f"something else was sent\n{story}"
