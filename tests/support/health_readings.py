"""Readings, limits and a node for the pure tests of fleet.health (tests/fleet/test_health*.py):
every value sampled a given age before one fixed NOW."""

from __future__ import annotations

from fleet.health import GpuLimits, Level, NodeSummary, Reading, node_summary

NOW = 1_800_000_000.0
OK, UNKNOWN, WARN, CRIT = Level.OK, Level.UNKNOWN, Level.WARN, Level.CRIT

# H100 80GB HBM3 SXM, absolute form (docs/reference/gpu.md, "Limits").
H100 = GpuLimits(slowdown_c=89, shutdown_c=92, gpu_max_c=87, mem_max_c=95, power_limit_max_w=700)
# The same GPU on a 565.x driver: T.Limit offsets from max-operating.
H100_TLIMIT = GpuLimits(
    tlimit_slowdown_c=-2, tlimit_shutdown_c=-8, tlimit_gpu_max_c=0, tlimit_mem_max_c=-8
)


def reading(age_s: float = 0.0, **values: float) -> Reading:
    """Every value sampled `age_s` before NOW."""
    return Reading(values, {name: NOW - age_s for name in values})


def cool_gpu(age_s: float = 0.0, **extra: float) -> Reading:
    return reading(age_s, **{"temp_gpu_c": 60.0, "power_w": 500.0, **extra})


def node(*gpus: Reading, meter: Reading | None = None) -> NodeSummary:
    return node_summary([(g, H100) for g in gpus], meter, NOW)
