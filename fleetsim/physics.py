"""GPU and node physics, calibrated on the H200 capture (tests/data/nvml/h200/).

What the capture shows and this model reproduces:
- idle ~80 W, GPU 37–38 °C, HBM 40 °C, SM clock 345 MHz, reason 0x1 (GpuIdle);
- full load held at the 700 W cap: the 1 s average sits at 688–696 W with SwPowerCap (0x4)
  set, SM clock 1440–1515 MHz, GPU 61–63 °C, HBM 52–53 °C;
- the die reacts within a second or two, the heatsink/coolant part over tens of seconds;
- `power_instant_w` swings ±60 W around the average and can pass the cap; the average cannot;
- power-violation time grows ~1 s per second spent at the cap.

Temperature follows power and the local coolant (inlet air, or the liquid around the cold
plate) with a lag. At the device's own limits the GPU slows itself, the way the driver and
the hardware do:
- SW thermal slowdown at the max-operating temperature: power (and with it the clocks) is
  cut to what holds the die there;
- HW slowdown at the slowdown threshold: clocks at least halve and power is cut further,
  down to the GPU's floor, until the die settles just under the threshold; it lets go
  only once the die is 2 K below it (the hardware's hysteresis), so it does not flap;
- at the shutdown threshold the GPU trips: it falls off the bus (XID 79) and is lost.
The thresholds are each model's own (`GpuSpec`): the H200's from the capture's
`nvml_inventory.json`, the H100's from public `nvidia-smi -q` output (docs/reference/gpu.md),
the GB200's as below. A GPU's idle and full-load power are its model's too, and so is the
server around it (`ServerSpec`): an HGX 8-GPU box, or a GB200 NVL72 compute tray.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from agents.protocol import reasons
from agents.protocol.memory import MEMORY_ERRORS_KEY, NOT_SUPPORTED


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """What a GPU model reports about itself: memory and its own limits."""

    model: str
    mem_total_mib: float
    power_cap_w: float
    power_min_w: float
    slowdown_c: float
    shutdown_c: float
    gpu_max_c: float
    mem_max_c: float
    idle_w: float = 80.0  # at the lowest clock, nothing running (the H200 capture: ~80 W)
    uncapped_w: float = 850.0  # what a full matmul load would draw without its cap
    # Compute dies the heat spreads over: the die-to-sink resistance is one die's, divided.
    dies: int = 1


# H200 SXM 141 GB: the capture's nvml_inventory.json (memory_info.total 150754820096 B =
# 143771 MiB; power 700 W, min 200 W; shutdown 95, slowdown 89, GPU max 87, memory max 95 °C).
H200 = GpuSpec("NVIDIA H200", 143771.0, 700.0, 200.0, 89.0, 95.0, 87.0, 95.0)
# H100 80GB HBM3 SXM: limits from public `nvidia-smi -q` output (docs/reference/gpu.md:
# 700/200 W, shutdown 92, slowdown 89, GPU max 87, memory max 95 °C); memory is
# the 81559 MiB `nvidia-smi` prints for this model (80 GiB less the driver's reserve).
H100 = GpuSpec("NVIDIA H100 80GB HBM3", 81559.0, 700.0, 200.0, 89.0, 92.0, 87.0, 95.0)
# GB200 (the Blackwell GPU of a GB200 NVL72 compute tray), NVML name "NVIDIA GB200":
# - power limit 1200 W, minimum 200 W: NVIDIA DPS's shipped GB200 GPU specification
#   (minLoadWatts 200, maxLoadWatts 1200), https://docs.nvidia.com/datacenter/dps/versions/
#   latest/guides/concepts/device-specifications.html; nvidia-smi on GB200 trays prints the
#   same 1200 W cap;
# - memory 189471 MiB, what nvidia-smi prints for the 186 GB of HBM3e (MLCommons' GB200-NVL72
#   system description: 186 GB, 4 GPUs per node, https://raw.githubusercontent.com/mlcommons/
#   inference_results_v6.1/main/closed/Crusoe/systems/GB200-NVL72_GB200-186GB_aarch64x16_
#   Dynamo.json);
# - idle ~160 W (nvidia-smi on idle GB200 trays shows 149–181 W in P0);
# - two reticle-sized compute dies (NVIDIA's Blackwell architecture): `dies=2`;
# - the thermal limits: no public `nvidia-smi -q` of a GB200 gives them, so they are the
#   Hopper parts' (a model assumption, docs/simulator.md says so); uncapped demand is the
#   H200's ratio to its cap (850/700).
GB200 = GpuSpec(
    "NVIDIA GB200",
    189471.0,
    1200.0,
    200.0,
    89.0,
    95.0,
    87.0,
    95.0,
    idle_w=160.0,
    uncapped_w=1450.0,
    dies=2,
)
GPU_SPECS = (H200, H100, GB200)


def spec_for(model: str) -> GpuSpec:
    """The spec of an inventory model name ("NVIDIA H100 80GB HBM3", "H100", "NVIDIA GB200"…);
    H200 if unknown."""
    for spec in GPU_SPECS:
        if spec.model.split()[1] in model:
            return spec
    return H200


# The H200's figures under the names the rest of the simulator and its tests use.
POWER_CAP_W = H200.power_cap_w
POWER_MIN_W = H200.power_min_w
SLOWDOWN_C = H200.slowdown_c
SHUTDOWN_C = H200.shutdown_c
GPU_MAX_C = H200.gpu_max_c
MEM_MAX_C = H200.mem_max_c
MEM_TOTAL_MIB = H200.mem_total_mib
IDLE_W = H200.idle_w
# Power a full matmul load would draw without a cap: the cap then holds it (SwPowerCap).
UNCAPPED_FULL_W = H200.uncapped_w
# The least a busy GPU draws however hard it is slowed: its idle power at the lowest
# clock (the capture: ~80 W at 345 MHz; each model's own `GpuSpec.idle_w`). Below this,
# clocks cannot take more heat out.
THROTTLED_FLOOR_W = IDLE_W
# HW slowdown holds the die this far under its slowdown threshold and lets go only once
# the die is HW_RELEASE_K under it.
HW_HOLD_K = 1.0
HW_RELEASE_K = 2.0
# Clocks at least halve under HW slowdown (NVML: "HW Slowdown ... >= 2x"); with clock ∝
# (power share)^1.5 (see `_clocks`) half the clock is 0.5^(1/1.5) ≈ 63 % of the power.
HW_SLOWDOWN_POWER_SHARE = 0.5 ** (1 / 1.5)
MAX_SM_MHZ = 1980.0
IDLE_SM_MHZ = 345.0
MEM_MHZ = 3201.0

# Thermal resistance from coolant to die: idle 80 W → 38 °C, capped 692 W → 62 °C.
R_DIE = 0.030  # K/W, settles in a second or two
R_SINK = 0.0092  # K/W, settles over ~40 s
TAU_DIE_S = 1.5
TAU_SINK_S = 40.0
TAU_MEM_S = 8.0
# Die temperature at zero power above the local coolant, by how the rack is cooled.
COOLANT_OFFSET_C = {"air": 10.9, "rear_door": 10.9, "direct_liquid": 4.9, "immersion": 6.0}
# No two GPUs sit on their cold plate or heatsink alike: each GPU's offset is drawn once
# within ± this (a model assumption), so GPUs on the same water do not trip in lockstep.
CONTACT_SPREAD_K = 1.0


def _approach(value: float, target: float, dt: float, tau: float) -> float:
    return target + (value - target) * math.exp(-dt / tau)


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """The server around a model's GPUs: power beyond the GPUs' own, and the share of its
    heat the cold plates take when its rack is direct-liquid cooled (None: the cooling
    type's share, fleetsim/fleet.py LIQUID_SHARE)."""

    name: str
    base_w: float  # idle, besides the GPUs
    per_gpu_w: float  # idle, per GPU (NVSwitches, retimers, fans)
    load_w: float  # added at full load
    liquid_share: float | None = None


# HGX 8-GPU: CPUs, memory, NICs, fans and NVSwitches, ~1.2 kW idle; the GPUs at their
# 700 W cap and this make the ~10.2 kW of a DGX H100 (docs/reference/facility.md).
HGX = ServerSpec("HGX 8-GPU", 300.0, 110.0, 500.0)
# GB200 NVL72 compute tray: 2 Grace CPUs (50–420 W each), LPDDR5X, 4 BlueField-3/ConnectX-7
# NICs, fans, and its half of one of the rack's 9 NVLink Switch trays. NVIDIA DPS's shipped
# GB200 tray specification (URL above): ~1000 W idle with its GPUs, at most 6667 W; the
# Switch trays ~3.6 kW together (introl.com, "Why the NVIDIA GB300 NVL72 matters", citing
# Supermicro). Idle: 460 W + 4 × 160 W = 1.1 kW; full: 2030 W + 4 × ~1190 W ≈ 6.8 kW.
# Liquid takes the GPUs', CPUs', NICs' and switches' heat, ~85 % of the tray; the rest
# leaves with the air (MLCommons' system description above: "Mix of Liquid-cooled (for CPU,
# GPU, CX7, NVLink Switches) and Air-cooled (for the rest of the components)").
NVL72_TRAY = ServerSpec("GB200 NVL72 compute tray", 460.0, 0.0, 1570.0, liquid_share=0.85)


def server_for(model: str) -> ServerSpec:
    """The server a GPU model comes in: a GB200 is in an NVL72 tray, the others in HGX."""
    return NVL72_TRAY if spec_for(model) is GB200 else HGX


@dataclass(slots=True)
class GpuModel:
    index: int
    cooling: str
    rng: random.Random
    spec: GpuSpec = H200
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
    tripped: bool = False  # lost because it reached its shutdown temperature
    mem_used_mib: float = 615.0
    contact_k: float = 0.0  # this GPU's own offset over the coolant, ± CONTACT_SPREAD_K

    def __post_init__(self) -> None:
        if self.spec is not H200:  # the defaults above are the H200's idle point
            self.power_avg_w = self.power_instant_w = self.spec.idle_w

    @property
    def r_die(self) -> float:
        return R_DIE / self.spec.dies

    def step(self, dt: float, load: float, coolant_c: float, power: float | None = None) -> bool:
        """Advance `dt` seconds at utilisation `load` (0..1), local coolant at `coolant_c`.
        `power` (0..1, default `load`) is the demand over idle where it parts from the SM
        activity: a hung collective's kernels keep the SMs "busy" at little power.

        Returns True on the step the GPU reaches its shutdown temperature and trips: it is
        then lost (no power, no samples) until reset; the caller reports the XID 79.
        """
        if self.lost:
            self._cool_while_off(dt, coolant_c)
            return False
        offset = COOLANT_OFFSET_C.get(self.cooling, 10.9) + self.contact_k
        idle_w = self.spec.idle_w
        demand_w = idle_w + (load if power is None else power) * (self.spec.uncapped_w - idle_w)
        bits, allowed_w = self._limits(demand_w, load)
        target_w = min(demand_w, allowed_w)
        # The driver's average lags the instant reading by about its 1 s window.
        self.power_avg_w = _approach(self.power_avg_w, target_w, dt, 0.4)
        if bits & reasons.SW_POWER_CAP:
            self.power_avg_w = min(self.power_avg_w, allowed_w - self.rng.uniform(4.0, 12.0))
        swing = (30.0 * load + 1.5) * self.power_cap_w / POWER_CAP_W  # the capture's, to scale
        self.power_instant_w = max(idle_w * 0.5, self.power_avg_w + self.rng.gauss(0.0, swing))
        self._heat(dt, coolant_c + offset)
        self._clocks(load, demand_w, bits)
        self.reasons = bits
        self.util_pct = round(100.0 * load) if load >= 0.01 else 0.0
        self.energy_j += self.power_avg_w * dt
        self._count_violations(dt, bits)
        self.mem_used_mib = 615.0 + load * 0.55 * self.spec.mem_total_mib
        if self.temp_die_c >= self.spec.shutdown_c:
            self._trip()
            return True
        return False

    def _limits(self, demand_w: float, load: float) -> tuple[int, float]:
        """The clock-event reasons now and the power they allow.

        Both thermal controls act on the fast die loop: the power that would settle the die
        at a temperature, over the heatsink as it is now, is (temperature − sink) / R_DIE.
        """
        bits = reasons.GPU_IDLE if load < 0.01 else 0
        allowed_w = self.power_cap_w
        if demand_w > allowed_w:
            bits |= reasons.SW_POWER_CAP
        # The driver acts within milliseconds: within one of our steps it already holds
        # back any power that would take the die past max-operating.
        max_op_w = self._settling_w(self.spec.gpu_max_c)
        if demand_w > max_op_w:
            bits |= reasons.SW_THERMAL_SLOWDOWN
            allowed_w = min(allowed_w, max_op_w)
        in_hw_slowdown = bool(self.reasons & reasons.HW_SLOWDOWN)
        release_c = self.spec.slowdown_c - HW_RELEASE_K
        if self.temp_die_c >= self.spec.slowdown_c or (
            in_hw_slowdown and self.temp_die_c >= release_c
        ):
            bits |= reasons.HW_SLOWDOWN | reasons.HW_THERMAL_SLOWDOWN
            hold_w = self._settling_w(self.spec.slowdown_c - HW_HOLD_K)
            allowed_w = min(allowed_w, hold_w, HW_SLOWDOWN_POWER_SHARE * demand_w)
        return bits, max(allowed_w, min(demand_w, self.spec.idle_w))

    def _settling_w(self, die_c: float) -> float:
        """Power at which the die settles at `die_c` over the heatsink as it is now."""
        return max(self.spec.idle_w, (die_c - self.temp_sink_c) / self.r_die)

    def _count_violations(self, dt: float, bits: int) -> None:
        ns = int(dt * 1e9)
        if bits & reasons.SW_POWER_CAP:
            self.violation_power_ns += ns
        if bits & (reasons.SW_THERMAL_SLOWDOWN | reasons.HW_THERMAL_SLOWDOWN):
            self.violation_thermal_ns += ns
        if bits & reasons.SW_THERMAL_SLOWDOWN:
            self.slowdown_sw_thermal_ns += ns
        if bits & reasons.HW_THERMAL_SLOWDOWN:
            self.slowdown_hw_thermal_ns += ns

    def _trip(self) -> None:
        """Thermal shutdown: the GPU powers itself off and drops from the PCIe bus."""
        self.lost = self.tripped = True
        self.power_avg_w = self.power_instant_w = 0.0
        self.clock_sm_mhz = 0.0
        self.util_pct = 0.0

    def _cool_while_off(self, dt: float, coolant_c: float) -> None:
        self.power_avg_w = self.power_instant_w = 0.0
        self.temp_sink_c = _approach(self.temp_sink_c, coolant_c, dt, TAU_SINK_S)
        self.temp_die_c = _approach(self.temp_die_c, self.temp_sink_c, dt, TAU_DIE_S)
        self.temp_mem_c = _approach(self.temp_mem_c, self.temp_sink_c, dt, TAU_MEM_S)

    def reset(self) -> None:
        """Back on the bus after a GPU reset (or the node's power cycle): idle, cool."""
        self.lost = self.tripped = False
        self.reasons = reasons.GPU_IDLE
        self.power_avg_w = self.power_instant_w = self.spec.idle_w
        self.clock_sm_mhz = IDLE_SM_MHZ

    def _heat(self, dt: float, base_c: float) -> None:
        self.temp_sink_c = _approach(
            self.temp_sink_c, base_c + R_SINK * self.power_avg_w, dt, TAU_SINK_S
        )
        die_target = self.temp_sink_c + self.r_die * self.power_avg_w
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
            clock = min(clock, 0.5 * MAX_SM_MHZ)
        self.clock_sm_mhz = max(IDLE_SM_MHZ, round(clock / 15.0) * 15.0)

    def sample(self, ts: float) -> dict[str, Any]:
        """A protocol-v1 `gpu` sample."""
        return {
            "ts": ts,
            "gpu": self.index,
            "util_gpu_pct": self.util_pct,
            "util_mem_pct": round(self.util_pct * 0.45),
            "mem_used_mib": round(self.mem_used_mib),
            "mem_total_mib": self.spec.mem_total_mib,
            "temp_gpu_c": round(self.temp_die_c),
            "temp_mem_c": round(self.temp_mem_c),
            "temp_margin_c": round(self.spec.gpu_max_c - self.temp_die_c),
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
            "uuid": gpu_uuid(node, self.index),
            "model": model or self.spec.model,
            "mem_total_mib": self.spec.mem_total_mib,
            "driver": "580.159.04",
            "mig_mode": False,
            "limits": {
                "slowdown_c": self.spec.slowdown_c,
                "shutdown_c": self.spec.shutdown_c,
                "gpu_max_c": self.spec.gpu_max_c,
                "mem_max_c": self.spec.mem_max_c,
                "power_limit_default_w": self.spec.power_cap_w,
                "power_limit_min_w": self.spec.power_min_w,
                "power_limit_max_w": self.spec.power_cap_w,
                "tlimit_slowdown_c": self.spec.gpu_max_c - self.spec.slowdown_c,
                "tlimit_shutdown_c": self.spec.gpu_max_c - self.spec.shutdown_c,
                "tlimit_gpu_max_c": 0.0,
                "tlimit_mem_max_c": 0.0,
            },
            # As an agent reads an H100/H200: the simulated ECC counts are never cleared, so
            # they are the lifetime ones too; page retirement is not supported (row remapping).
            MEMORY_ERRORS_KEY: {
                "ecc_sbe_agg_total": self.ecc_sbe,
                "ecc_dbe_agg_total": self.ecc_dbe,
                "retired_pages_sbe": NOT_SUPPORTED,
                "retired_pages_dbe": NOT_SUPPORTED,
                "retired_pages_pending": NOT_SUPPORTED,
            },
        }


def gpu_uuid(node: str, index: int) -> str:
    """A simulated GPU's UUID, as its `gpu_info` and its node's fake NVML report it."""
    return f"GPU-sim-{node}-{index}"


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
    server: ServerSpec = HGX

    def power_w(self, load: float) -> float:
        server = self.server
        base = server.base_w + server.per_gpu_w * self.gpu_count
        return base + server.load_w * load + self.extra_w

    def step(self, dt: float, load: float, inlet_c: float) -> None:
        self.cpu_pct = min(100.0, max(0.5, 3.0 + 20.0 * load + self.rng.gauss(0, 1.5)))
        self.temp_cpu_c = _approach(self.temp_cpu_c, inlet_c + 18 + 0.25 * self.cpu_pct, dt, 20.0)
        self.rx_bytes_s = max(0.0, 2e6 + load * 4e9 * self.rng.uniform(0.7, 1.0))
        self.tx_bytes_s = max(0.0, 1e6 + load * 3.5e9 * self.rng.uniform(0.7, 1.0))
