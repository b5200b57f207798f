"""GPU and node physics, calibrated on the H200 capture (tests/data/nvml/h200/).

What the capture shows and this model reproduces:
- idle ~80 W, GPU 37–38 °C, HBM 40 °C, SM clock 345 MHz, reason 0x1 (GpuIdle);
- full load held at the 700 W cap: the 1 s average sits at 688–696 W with SwPowerCap (0x4)
  set, SM clock 1440–1515 MHz, GPU 61–63 °C, HBM 52–53 °C;
- the die reacts within a second or two, the heatsink/coolant part over tens of seconds;
- `power_instant_w` swings ±60 W around the average and can pass the cap; the average cannot;
- power-violation time grows ~1 s per second spent at the cap.

Temperature follows power and the local coolant (inlet air, or the liquid around the cold
plate) with a lag. At the device's own limits the GPU slows itself: SW thermal slowdown at
the max-operating temperature (clocks and power drop so it holds there), HW slowdown at the
slowdown threshold (clocks roughly halve).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from agents.protocol import reasons

# H200 SXM limits (nvml_inventory.json)
POWER_CAP_W = 700.0
POWER_MIN_W = 200.0
IDLE_W = 80.0
# Power a full matmul load would draw without a cap: the cap then holds it (SwPowerCap).
UNCAPPED_FULL_W = 850.0
SLOWDOWN_C = 89.0
SHUTDOWN_C = 95.0
GPU_MAX_C = 87.0
MEM_MAX_C = 95.0
MAX_SM_MHZ = 1980.0
IDLE_SM_MHZ = 345.0
MEM_MHZ = 3201.0
MEM_TOTAL_MIB = 143771.0

# Thermal resistance from coolant to die: idle 80 W → 38 °C, capped 692 W → 62 °C.
R_DIE = 0.030  # K/W, settles in a second or two
R_SINK = 0.0092  # K/W, settles over ~40 s
TAU_DIE_S = 1.5
TAU_SINK_S = 40.0
TAU_MEM_S = 8.0
# Die temperature at zero power above the local coolant, by how the rack is cooled.
COOLANT_OFFSET_C = {"air": 10.9, "rear_door": 10.9, "direct_liquid": 4.9, "immersion": 6.0}


def _approach(value: float, target: float, dt: float, tau: float) -> float:
    return target + (value - target) * math.exp(-dt / tau)


@dataclass(slots=True)
class GpuModel:
    index: int
    cooling: str
    rng: random.Random
    power_cap_w: float = POWER_CAP_W
    temp_die_c: float = 38.0
    temp_sink_c: float = 36.0
    temp_mem_c: float = 40.0
    power_avg_w: float = IDLE_W
    power_instant_w: float = IDLE_W
    clock_sm_mhz: float = IDLE_SM_MHZ
    reasons: int = reasons.GPU_IDLE
    util_pct: float = 0.0
    energy_j: float = 0.0
    violation_power_ns: int = 0
    violation_thermal_ns: int = 0
    slowdown_sw_thermal_ns: int = 0
    slowdown_hw_thermal_ns: int = 0
    ecc_sbe: int = 0
    ecc_dbe: int = 0
    remapped_uncorrectable: int = 0
    remap_pending: int = 0
    lost: bool = False
    mem_used_mib: float = 615.0

    def step(self, dt: float, load: float, coolant_c: float) -> None:
        """Advance `dt` seconds at utilisation `load` (0..1), local coolant at `coolant_c`."""
        offset = COOLANT_OFFSET_C.get(self.cooling, 10.9)
        demand_w = IDLE_W + load * (UNCAPPED_FULL_W - IDLE_W)
        bits = reasons.GPU_IDLE if load < 0.01 else 0
        allowed_w = self.power_cap_w
        if demand_w > allowed_w:
            bits |= reasons.SW_POWER_CAP
        # The power at which the die would settle at max-operating: the SW thermal loop.
        thermal_w = (GPU_MAX_C - coolant_c - offset) / (R_DIE + R_SINK)
        if self.temp_die_c >= GPU_MAX_C - 0.5 and demand_w > thermal_w:
            bits |= reasons.SW_THERMAL_SLOWDOWN
            allowed_w = min(allowed_w, max(thermal_w, IDLE_W * 0.8))
        if self.temp_die_c >= SLOWDOWN_C:
            bits |= reasons.HW_SLOWDOWN | reasons.HW_THERMAL_SLOWDOWN
            allowed_w = min(allowed_w, max(IDLE_W * 0.6, 0.5 * demand_w))
        target_w = min(demand_w, allowed_w)
        # The driver's average lags the instant reading by about its 1 s window.
        self.power_avg_w = _approach(self.power_avg_w, target_w, dt, 0.4)
        if bits & reasons.SW_POWER_CAP:
            self.power_avg_w = min(self.power_avg_w, allowed_w - self.rng.uniform(4.0, 12.0))
        swing = 30.0 * load + 1.5
        self.power_instant_w = max(IDLE_W * 0.5, self.power_avg_w + self.rng.gauss(0.0, swing))
        self._heat(dt, coolant_c + offset)
        self._clocks(load, demand_w, bits)
        self.reasons = bits
        self.util_pct = round(100.0 * load) if load >= 0.01 else 0.0
        self.energy_j += self.power_avg_w * dt
        ns = int(dt * 1e9)
        if bits & reasons.SW_POWER_CAP:
            self.violation_power_ns += ns
        if bits & (reasons.SW_THERMAL_SLOWDOWN | reasons.HW_THERMAL_SLOWDOWN):
            self.violation_thermal_ns += ns
        if bits & reasons.SW_THERMAL_SLOWDOWN:
            self.slowdown_sw_thermal_ns += ns
        if bits & reasons.HW_THERMAL_SLOWDOWN:
            self.slowdown_hw_thermal_ns += ns
        self.mem_used_mib = 615.0 + load * 0.55 * MEM_TOTAL_MIB

    def _heat(self, dt: float, base_c: float) -> None:
        self.temp_sink_c = _approach(
            self.temp_sink_c, base_c + R_SINK * self.power_avg_w, dt, TAU_SINK_S
        )
        die_target = self.temp_sink_c + R_DIE * self.power_avg_w
        self.temp_die_c = _approach(self.temp_die_c, die_target, dt, TAU_DIE_S)
        mem_target = 0.5 * self.temp_die_c + 21.0
        self.temp_mem_c = _approach(self.temp_mem_c, mem_target, dt, TAU_MEM_S)

    def _clocks(self, load: float, demand_w: float, bits: int) -> None:
        if load < 0.01:
            self.clock_sm_mhz = IDLE_SM_MHZ
            return
        # Under a cap the clock scales with the power it is allowed (calibrated: 700 W of
        # an 850 W demand → ~1480 MHz).
        ratio = min(1.0, self.power_avg_w / max(demand_w, 1.0))
        clock = MAX_SM_MHZ * ratio**1.5
        if bits & reasons.HW_SLOWDOWN:
            clock *= 0.5
        self.clock_sm_mhz = max(IDLE_SM_MHZ, round(clock / 15.0) * 15.0)

    def sample(self, ts: float) -> dict[str, Any]:
        """A protocol-v1 `gpu` sample."""
        return {
            "ts": ts,
            "gpu": self.index,
            "util_gpu_pct": self.util_pct,
            "util_mem_pct": round(self.util_pct * 0.45),
            "mem_used_mib": round(self.mem_used_mib),
            "mem_total_mib": MEM_TOTAL_MIB,
            "temp_gpu_c": round(self.temp_die_c),
            "temp_mem_c": round(self.temp_mem_c),
            "temp_margin_c": round(GPU_MAX_C - self.temp_die_c),
            "power_w": round(self.power_avg_w, 1),
            "power_instant_w": round(self.power_instant_w, 1),
            "power_limit_w": self.power_cap_w,
            "energy_j": round(self.energy_j, 1),
            "clock_sm_mhz": self.clock_sm_mhz,
            "clock_mem_mhz": MEM_MHZ,
            "pstate": 0,
            "clock_event_reasons": self.reasons,
            "violation_power_ns": self.violation_power_ns,
            "violation_thermal_ns": self.violation_thermal_ns,
            "slowdown_sw_thermal_ns": self.slowdown_sw_thermal_ns,
            "slowdown_hw_thermal_ns": self.slowdown_hw_thermal_ns,
            "ecc_sbe_vol_total": self.ecc_sbe,
            "ecc_dbe_vol_total": self.ecc_dbe,
            "remapped_rows_correctable": 0,
            "remapped_rows_uncorrectable": self.remapped_uncorrectable,
            "remap_pending": self.remap_pending,
            "remap_failure": 0,
            "pcie_replay_total": 0,
        }

    def info(self, node: str, model: str) -> dict[str, Any]:
        """`gpu_info`: the device's own limits, absolute and in the "T.Limit" form."""
        return {
            "gpu": self.index,
            "uuid": f"GPU-sim-{node}-{self.index}",
            "model": model or "NVIDIA H200",
            "mem_total_mib": MEM_TOTAL_MIB,
            "driver": "580.159.04",
            "mig_mode": False,
            "limits": {
                "slowdown_c": SLOWDOWN_C,
                "shutdown_c": SHUTDOWN_C,
                "gpu_max_c": GPU_MAX_C,
                "mem_max_c": MEM_MAX_C,
                "power_limit_default_w": POWER_CAP_W,
                "power_limit_min_w": POWER_MIN_W,
                "power_limit_max_w": POWER_CAP_W,
                "tlimit_slowdown_c": GPU_MAX_C - SLOWDOWN_C,
                "tlimit_shutdown_c": GPU_MAX_C - SHUTDOWN_C,
                "tlimit_gpu_max_c": 0.0,
                "tlimit_mem_max_c": 0.0,
            },
        }


@dataclass(slots=True)
class Workload:
    """Jobs arrive and finish: long training runs at full load, idle gaps, bursty inference."""

    rng: random.Random
    load: float = 0.0
    remaining_s: float = 0.0
    kind: str = "idle"

    def step(self, dt: float) -> float:
        self.remaining_s -= dt
        if self.remaining_s <= 0:
            self._next_job()
        if self.kind == "inference":
            # 0.6 s busy / 0.9 s idle seen at 1 Hz: a wandering average
            return min(1.0, max(0.05, self.rng.gauss(0.4, 0.15)))
        return self.load

    def _next_job(self) -> None:
        roll = self.rng.random()
        if self.kind != "idle" and roll < 0.35:
            self.kind, self.load = "idle", 0.0
            self.remaining_s = self.rng.uniform(20, 180)
        elif roll < 0.75:
            self.kind, self.load = "training", self.rng.uniform(0.93, 1.0)
            self.remaining_s = self.rng.uniform(120, 900)
        else:
            self.kind, self.load = "inference", 0.4
            self.remaining_s = self.rng.uniform(60, 600)


@dataclass(slots=True)
class HostModel:
    """The rest of the server: CPUs, fans, memory, NICs (~1.2 kW idle for an 8-GPU box)."""

    rng: random.Random
    gpu_count: int
    cpu_pct: float = 3.0
    temp_cpu_c: float = 40.0
    rx_bytes_s: float = 0.0
    tx_bytes_s: float = 0.0
    mem_total_mib: float = 2_063_000.0
    extra_w: float = 0.0  # a rack-overload fault adds load here
    gpus: list[GpuModel] = field(default_factory=list)

    def power_w(self, load: float) -> float:
        base = 300.0 + 110.0 * self.gpu_count  # CPUs, memory, NICs, fans, NVSwitch
        return base + 500.0 * load + self.extra_w

    def step(self, dt: float, load: float, inlet_c: float) -> None:
        self.cpu_pct = min(100.0, max(0.5, 3.0 + 20.0 * load + self.rng.gauss(0, 1.5)))
        self.temp_cpu_c = _approach(self.temp_cpu_c, inlet_c + 18 + 0.25 * self.cpu_pct, dt, 20.0)
        self.rx_bytes_s = max(0.0, 2e6 + load * 4e9 * self.rng.uniform(0.7, 1.0))
        self.tx_bytes_s = max(0.0, 1e6 + load * 3.5e9 * self.rng.uniform(0.7, 1.0))
