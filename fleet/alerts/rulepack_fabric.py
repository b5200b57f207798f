"""The built-in fabric rules (docs/rules.md, *Fabric*): part of the rule pack
(fleet/alerts/rulepack.py, `BUILTIN_RULES`). InfiniBand/RoCE ports: node-scoped, one instance
per node naming the worst port (`{port}`); NVLink: per GPU. Every threshold is
fleet/health/fabric.py's."""

from __future__ import annotations

from fleet.alerts.rulespec import RuleSpec
from fleet.health import fabric
from fleet.words import FABRIC_COUNTER_WORDS

_NODE = "{node} {port}"


def _rate_rule(limit: fabric.RateLimit) -> RuleSpec:
    per_min = fabric.RATE_WINDOW_S / 60
    words = FABRIC_COUNTER_WORDS[limit.counter]  # as the node page says it
    return RuleSpec(
        f"node-fabric-{limit.counter.replace('_', '-')}-rate",
        f"Fabric port: {words.lower()} rising",
        "node",
        limit.signal,
        "gt",
        limit.per_hour,
        limit.per_hour / 2,
        0,  # the rate is already measured over 5–10 minutes of reads
        "warning",
        _NODE + f": {words.lower()} {{value:,.0f}} an hour (limit {limit.per_hour:,.0f})",
        f"`{limit.counter}` rising faster than {limit.per_hour:g} an hour over the last "
        f"{per_min:g}–{2 * per_min:g} minutes: the link is degrading (cable, transceiver, "
        "port); reseat or replace before it flaps.",
        runbook_url=fabric.SOURCES["nvsentinel"],
    )


FABRIC_RULES: tuple[RuleSpec, ...] = (
    RuleSpec(
        "node-fabric-port-flapped",
        "Fabric port flapped",
        "node",
        "fabric_port_flaps",
        "ge",
        1,
        None,
        0,
        "warning",
        _NODE + f" went down and retrained ({{value:.0f}}× in {fabric.FLAP_WINDOW_S / 60:g} min)",
        "`link_downed` rose: the link failed to retrain and went down, however briefly; "
        "RDMA traffic on it (NCCL, storage) was cut.",
        params={"window_s": fabric.FLAP_WINDOW_S},
        runbook_url=fabric.SOURCES["sysfs-abi"],
    ),
    RuleSpec(
        "node-fabric-port-flapping",
        "Fabric port flapping",
        "node",
        "fabric_port_flaps",
        "ge",
        fabric.FLAPPING_COUNT,
        None,
        0,
        "critical",
        _NODE + " is flapping: down {value:.0f}× in the last hour",
        "The same port went down repeatedly within an hour: drain the node's fabric "
        "traffic and check the cable, transceiver and switch port.",
        params={"window_s": fabric.FLAPPING_WINDOW_S},
        runbook_url=fabric.SOURCES["nvsentinel"],
    ),
    RuleSpec(
        "node-fabric-port-down",
        "Fabric port down",
        "node",
        "fabric_ports_down",
        "ge",
        1,
        None,
        fabric.PORT_DOWN_FOR_S,
        "critical",
        _NODE + " is down ({value:.0f} port(s) down that were up)",
        "A port that was ACTIVE is not: the node has lost that link's bandwidth, and jobs "
        "using it fail. A port never ACTIVE (not cabled) is not judged.",
        runbook_url=fabric.SOURCES["sysfs-abi"],
    ),
    *(_rate_rule(limit) for limit in fabric.RATE_LIMITS),
    RuleSpec(
        "gpu-nvlink-crc-rate",
        "NVLink CRC errors",
        "gpu",
        "nvlink_crc_errors_per_s",
        "ge",
        fabric.NVLINK_CRC_PER_S,
        fabric.NVLINK_CRC_PER_S / 2,
        0,  # already a 5–10 minute rate
        "critical",
        "{node} GPU {gpu}: NVLink CRC errors {value:,.0f} a second"
        f" (limit {fabric.NVLINK_CRC_PER_S:g})",
        "CRC errors on the GPU's NVLink links at DCGM's failing rate (100 a second): the "
        "links retransmit more than they carry; reset the GPU, then check the NVSwitch tray.",
        runbook_url=fabric.SOURCES["dcgm-health"],
    ),
    RuleSpec(
        "gpu-nvlink-errors",
        "NVLink replay/recovery errors",
        "gpu",
        "nvlink_link_errors",
        "ge",
        fabric.NVLINK_ERRORS_MIN,
        None,
        0,
        "critical",
        "{node} GPU {gpu}: {value:.0f} NVLink replay/recovery errors in the last 5–10 min",
        "DCGM's health watch fails a GPU on any NVLink replay or recovery error "
        "(DCGM_LIMIT_MAX_NVLINK_ERROR): a link had to retrain or resend.",
        runbook_url=fabric.SOURCES["dcgm-limits"],
    ),
)
