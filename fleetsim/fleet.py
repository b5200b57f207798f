"""The simulated site: nodes in racks, racks on feeds and cooling loops, a facility around them.

`SiteModel.step(dt, elapsed)` advances everything; it needs no network, so tests can run
minutes of simulated time in milliseconds. Readings come out in protocol-v1 shape.

- Rack power is the sum of its nodes plus overhead (switches, PDUs, rack fans), split over
  its feeds.
- A cooling loop (CDU) carries the heat of its liquid and rear-door racks:
  return = supply + heat / (flow · c_p). Its nominal flow gives a 10 K rise at capacity. The
  liquid around a rack's cold plates follows that with a lag (the thermal mass of the
  water in the rack's circuit), so when the pumps stop the GPUs heat up over tens of
  seconds, not at once. Water cannot take heat from parts colder than itself: the host's
  cold-plated parts stop giving it theirs as it nears their limit, the GPUs keep giving
  theirs (they are the hottest parts) until they slow down, and fall off the bus if it
  still climbs to their shutdown temperature.
- Facility PUE: IT power plus cooling (by cooling type, worse when it is hot outside or the
  chiller is degraded) plus distribution losses, over IT power.
"""

from __future__ import annotations

import math
import random
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from agents import __version__
from agents.collectors.base import Reading
from agents.protocol.memory import GPU_RESET
from fleetsim.faults import Fault, FaultPlan
from fleetsim.inventory import Inventory, Loop, Node, Rack
from fleetsim.jobs import GpuLoad, JobSchedule, MigSlice
from fleetsim.physics import (
    CONTACT_SPREAD_K,
    GpuModel,
    HostModel,
    Workload,
    server_for,
    spec_for,
)
from fleetsim.plant import (
    BOIL_CLAMP_C,
    COOLING_PER_W,
    DESIGN_RISE_K,
    HALL_AIR_C,
    LIQUID_SHARE,
    RACK_OVERHEAD_W,
    RACK_WATER_KG_PER_KW,
    RACK_WATER_MIN_KG,
    THERMAL_RESET_AFTER_S,
    WATER_CP_KJ_PER_KG_K,
    host_capture,
    outdoor_c,
)


def _seeded(name: str, seed: int) -> random.Random:
    return random.Random(zlib.crc32(name.encode()) ^ seed)


def _contact_k(gpu: str, seed: int) -> float:
    """The GPU's own contact offset, from a generator of its own (the GPU's stays as it was)."""
    return _seeded(f"{gpu}/contact", seed).uniform(-CONTACT_SPREAD_K, CONTACT_SPREAD_K)


@dataclass(slots=True)
class VirtualNode:
    node: Node
    rack: Rack
    host: HostModel
    gpus: list[GpuModel]
    workload: Workload
    powered: bool = True
    load: float = 0.0
    pending_events: list[dict[str, Any]] = field(default_factory=list)
    lost_until: dict[int, float] = field(default_factory=dict)  # gpu index -> elapsed
    tripped_at: dict[int, float] = field(default_factory=dict)  # gpu index -> elapsed
    # Each GPU's load from the job schedule (fleetsim/jobs.py); None: the node-wide
    # `workload` drives every GPU alike.
    loads: dict[int, GpuLoad] | None = None
    mig: dict[int, tuple[MigSlice, ...]] = field(default_factory=dict)  # GPUs in MIG mode
    info_due: bool = False  # a memory-error count changed: gpu_info again, as the agent does

    @property
    def name(self) -> str:
        return self.node.name

    def power_w(self) -> float:
        return self.host_power_w() + self.gpu_power_w()

    def host_power_w(self) -> float:
        return self.host.power_w(self.load) if self.powered else 0.0

    def gpu_power_w(self) -> float:
        if not self.powered:
            return 0.0
        return sum(g.power_avg_w for g in self.gpus if not g.lost)

    def step(
        self, dt: float, coolant_c: float, inlet_c: float, full_load: bool, elapsed_s: float = 0.0
    ) -> None:
        if not self.powered:
            for gpu in self.gpus:  # cools toward the coolant while off
                gpu.temp_die_c = gpu.temp_sink_c = max(coolant_c, gpu.temp_die_c - dt * 0.2)
                if gpu.tripped:  # a power cycle clears a thermal trip
                    gpu.reset()
                    self.tripped_at.pop(gpu.index, None)
            return
        if self.loads is not None and not full_load:
            self._step_jobs(dt, coolant_c, self.loads, elapsed_s)
            self.host.step(dt, self.load, inlet_c)
            return
        self.load = 1.0 if full_load else self.workload.step(dt)
        for gpu in self.gpus:
            jitter = 0.0 if self.load < 0.01 else gpu.rng.uniform(-0.02, 0.0)
            if gpu.step(dt, 0.0 if gpu.lost else max(0.0, self.load + jitter), coolant_c):
                self._tripped(gpu, elapsed_s)
            elif gpu.tripped and self._reset_due(gpu, elapsed_s):
                gpu.reset()
                del self.tripped_at[gpu.index]
        self.host.step(dt, self.load, inlet_c)

    def _step_jobs(
        self, dt: float, coolant_c: float, loads: dict[int, GpuLoad], elapsed_s: float
    ) -> None:
        """Each GPU as the jobs on it drive it; the host works as hard as its GPUs on average."""
        for gpu in self.gpus:
            load = loads.get(gpu.index, GpuLoad())
            util, power = (0.0, 0.0) if gpu.lost else (load.util, load.power)
            if gpu.step(dt, util, coolant_c, power):
                self._tripped(gpu, elapsed_s)
            elif gpu.tripped and self._reset_due(gpu, elapsed_s):
                gpu.reset()
                del self.tripped_at[gpu.index]
            if not gpu.lost:
                gpu.mem_used_mib = 615.0 + load.memory_mib
        self.load = sum(loads.get(g.index, GpuLoad()).power for g in self.gpus) / max(
            1, len(self.gpus)
        )

    def _tripped(self, gpu: GpuModel, elapsed_s: float) -> None:
        self.tripped_at[gpu.index] = elapsed_s
        self.pending_events += fell_off_the_bus_events(gpu.index, time.time())

    def _reset_due(self, gpu: GpuModel, elapsed_s: float) -> bool:
        off_for = elapsed_s - self.tripped_at.get(gpu.index, elapsed_s)
        return off_for >= THERMAL_RESET_AFTER_S and gpu.temp_die_c < gpu.spec.gpu_max_c

    def reading(self, ts: float, inlet_c: float, outlet_c: float, with_info: bool) -> Reading:
        reading = Reading()
        for gpu in self.gpus:
            if not gpu.lost:
                reading.add("gpu", gpu.sample(ts))
        reading.add(
            "node",
            {
                "ts": ts,
                "cpu_pct": round(self.host.cpu_pct, 1),
                "load1": round(self.host.cpu_pct * 2.24 / 10.0, 2),
                "mem_used_mib": round(self.host.mem_total_mib * (0.05 + 0.3 * self.load)),
                "mem_total_mib": self.host.mem_total_mib,
                "temp_cpu_c": round(self.host.temp_cpu_c, 1),
                "temp_inlet_c": round(inlet_c, 1),
                "temp_outlet_c": round(outlet_c, 1),
                "power_w": round(self.power_w()),
                "net_rx_bytes_s": round(self.host.rx_bytes_s),
                "net_tx_bytes_s": round(self.host.tx_bytes_s),
            },
        )
        if with_info or self.info_due:  # as the real agent: a GPU it lost is not described
            self.info_due = False
            models = dict(self.node.gpus)
            reading.gpu_info = [
                self._info(g, models.get(g.index, "")) for g in self.gpus if not g.lost
            ]
            # The simulator runs this checkout's agent code: its version is the agent's.
            reading.node_info = {
                "hostname": self.name,
                "agent_version": __version__,
                "simulated": True,
            }
        reading.events, self.pending_events = self.pending_events, []
        return reading

    def _info(self, gpu: GpuModel, model: str) -> dict[str, Any]:
        info = gpu.info(self.name, model)
        slices = self.mig.get(gpu.index)
        if slices:  # as agents/collectors/gpu.py describes a GPU in MIG mode
            info["mig_mode"] = True
            info["mig"] = [
                {"gi": s.gi, "ci": 0, "profile": s.profile, "mem_mib": s.mem_mib} for s in slices
            ]
        return info


@dataclass(slots=True)
class RackState:
    rack: Rack
    nodes: list[VirtualNode]
    power_w: float = 0.0
    inlet_c: float = HALL_AIR_C
    outlet_c: float = HALL_AIR_C + 10.0
    liquid_supply_c: float = 30.0
    liquid_return_c: float = 35.0
    coolant_c: float = 32.0  # what the cold plates see
    flow_lpm: float = 0.0
    energy_kwh: float = 0.0
    liquid_heat_kw: float = 0.0  # what the rack's parts give the water now

    @property
    def water_kg(self) -> float:
        return max(RACK_WATER_MIN_KG, RACK_WATER_KG_PER_KW * self.rack.budget_kw)


@dataclass(slots=True)
class LoopState:
    loop: Loop
    racks: list[RackState]
    supply_c: float
    return_c: float = 0.0
    flow_lpm: float = 0.0
    heat_kw: float = 0.0
    pumps_total: int = 3
    pumps_failed: int = 0

    @property
    def nominal_flow_lpm(self) -> float:
        kg_s = self.loop.capacity_kw / (WATER_CP_KJ_PER_KG_K * DESIGN_RISE_K)
        return kg_s * 60.0  # water: 1 kg ≈ 1 L

    @property
    def setpoint_c(self) -> float:
        return self.loop.supply_limit_c - 4.0


class SiteModel:
    def __init__(
        self,
        inventory: Inventory,
        faults: FaultPlan | None = None,
        seed: int = 0,
        jobs: JobSchedule | None = None,
    ) -> None:
        self.inventory = inventory
        self.faults = faults or FaultPlan()
        # The job schedule, when the simulator runs one: it drives each GPU's load.
        self.jobs = jobs
        self.nodes: dict[str, VirtualNode] = {}
        self.racks: dict[str, RackState] = {}
        for rack in inventory.racks:
            self.racks[rack.name] = RackState(rack, [])
        for node in inventory.nodes:
            rack_state = self.racks.get(node.rack)
            if rack_state is None:
                continue  # a node in a rack the inventory does not list: nothing to cool it
            rng = _seeded(node.name, seed)
            gpus = [
                GpuModel(
                    index=i,
                    cooling=rack_state.rack.cooling,
                    rng=_seeded(f"{node.name}/{i}", seed),
                    spec=spec_for(model),
                    power_cap_w=spec_for(model).power_cap_w,
                    contact_k=_contact_k(f"{node.name}/{i}", seed),
                )
                for i, model in node.gpus
            ]
            server = server_for(node.gpus[0][1] if node.gpus else "")
            host = HostModel(rng, len(gpus), server=server)
            virtual = VirtualNode(node, rack_state.rack, host, gpus, Workload(rng))
            if jobs is not None:
                virtual.mig = jobs.mig(node.name)
            self.nodes[node.name] = virtual
            rack_state.nodes.append(virtual)
        self.loops = {
            lp.name: LoopState(
                lp,
                [r for r in self.racks.values() if r.rack.loop == lp.name],
                supply_c=lp.supply_limit_c - 4.0,
            )
            for lp in inventory.loops
        }
        self.outdoor_c = 15.0
        self.it_power_w = 0.0
        self.cooling_power_w = 0.0
        self.total_power_w = 0.0
        self.total_energy_kwh = 0.0
        self.it_energy_kwh = 0.0
        self.elapsed_s = 0.0

    # -- stepping --------------------------------------------------------------------------

    def step(self, dt: float, elapsed_s: float, wall: float | None = None) -> None:
        self.elapsed_s = elapsed_s
        self.outdoor_c = outdoor_c(wall if wall is not None else time.time())
        chiller = self.faults.any_active("chiller-degraded", elapsed_s)
        self._one_shot_faults(dt, elapsed_s)
        if self.jobs is not None:
            for node in self.nodes.values():
                node.loads = self.jobs.loads(node.name, elapsed_s)
        for loop in self.loops.values():
            self._step_loop_supply(loop, dt, elapsed_s)
        for rack in self.racks.values():
            self._step_rack(rack, dt, elapsed_s, chiller)
        for loop in self.loops.values():
            self._step_loop_return(loop)
        self._step_facility(dt, chiller)

    def _one_shot_faults(self, dt: float, elapsed_s: float) -> None:
        for node in self.nodes.values():
            node.powered = self.faults.active("node-offline", node.name, elapsed_s) is None and (
                self.faults.active("node-offline", node.rack.name, elapsed_s) is None
            )
            for gpu in node.gpus:
                target = f"{node.name}/{gpu.index}"
                xid = self.faults.started("gpu-xid", target, elapsed_s, dt)
                if xid is not None:
                    self._xid(node, gpu, xid, elapsed_s)
                if gpu.lost and elapsed_s >= node.lost_until.get(gpu.index, math.inf):
                    del node.lost_until[gpu.index]
                    gpu.reset()
                reset = self.faults.started("gpu-reset", target, elapsed_s, dt) or (
                    self.faults.started("gpu-reset", node.name, elapsed_s, dt)
                )
                if reset is not None and gpu.lost:
                    reset_gpu(node, gpu)
                dbe = self.faults.started("ecc-dbe", target, elapsed_s, dt)
                if dbe is not None:
                    gpu.ecc_dbe += 1
                    node.info_due = True
                    gpu.remapped_uncorrectable += 1
                    gpu.remap_pending = 1
                    ts = time.time()
                    node.pending_events += [
                        {"ts": ts, "gpu": gpu.index, "kind": "ecc_dbe", "detail": "volatile DBE"},
                        {
                            "ts": ts,
                            "gpu": gpu.index,
                            "kind": "xid",
                            "code": 48,
                            "detail": "double-bit ECC error",
                        },
                    ]

    def _xid(self, node: VirtualNode, gpu: GpuModel, fault: Fault, elapsed_s: float) -> None:
        code = int(fault.number("code", 79))
        ts = time.time()
        if code == 79:
            gpu.lost = True
            end = math.inf if fault.duration_s is None else fault.start_s + fault.duration_s
            node.lost_until[gpu.index] = end
            node.pending_events += fell_off_the_bus_events(gpu.index, ts)
        else:
            node.pending_events.append(
                {"ts": ts, "gpu": gpu.index, "kind": "xid", "code": code, "detail": f"XID {code}"}
            )

    def _step_loop_supply(self, loop: LoopState, dt: float, elapsed_s: float) -> None:
        pump = self.faults.active("cdu-pump-fail", loop.loop.name, elapsed_s)
        loop.pumps_failed = 0
        if pump is not None:
            loop.pumps_failed = min(loop.pumps_total, int(pump.number("pumps", loop.pumps_total)))
        running = loop.pumps_total - loop.pumps_failed
        # N+1: two of the three pumps carry the nominal flow, so one failure costs nothing.
        loop.flow_lpm = loop.nominal_flow_lpm * min(running, 2) / 2.0
        chiller = self.faults.active("chiller-degraded", loop.loop.name, elapsed_s)
        target = loop.setpoint_c + (chiller.number("rise", 8.0) if chiller else 0.0)
        loop.supply_c += (target - loop.supply_c) * (1 - math.exp(-dt / 120.0))

    def _step_rack(self, rack: RackState, dt: float, elapsed_s: float, chiller: bool) -> None:
        overload = self.faults.active("rack-overload", rack.rack.name, elapsed_s)
        rack.inlet_c = HALL_AIR_C + (3.0 if chiller else 0.0)
        loop = self.loops.get(rack.rack.loop or "")
        liquid = loop is not None and liquid_share(rack) > 0
        if liquid and loop is not None:
            self._step_rack_liquid(rack, loop, dt)
        for node in rack.nodes:
            coolant = rack.coolant_c if rack.rack.liquid else rack.inlet_c
            node.host.extra_w = 0.0
            node.step(dt, coolant, rack.inlet_c, overload is not None, elapsed_s)
        if overload is not None and rack.nodes:
            # Someone plugged in more than the budget: load beyond the GPUs (factor × budget).
            want_w = overload.number("factor", 1.15) * rack.rack.budget_kw * 1000.0
            short = want_w - self._rack_power(rack)
            for node in rack.nodes:
                node.host.extra_w = max(0.0, short / len(rack.nodes))
        rack.power_w = self._rack_power(rack)
        rack.energy_kwh += rack.power_w * dt / 3.6e6
        air_share = 1.0 - liquid_share(rack)
        if rack.rack.cooling == "rear_door":
            rack.outlet_c = rack.inlet_c + 1.5
        else:
            rack.outlet_c = (
                rack.inlet_c + 12.0 * air_share * min(1.5, rack.power_w / 40_000.0) + 2.0
            )

    @staticmethod
    def _step_rack_liquid(rack: RackState, loop: LoopState, dt: float) -> None:
        """Energy balance of the water in the rack's cold-plate circuit.

        M·c_p·dT/dt = Q − 2·ṁ·c_p·(T − T_supply), T the mean water temperature. At nominal
        flow it settles within seconds at supply + Q/(2ṁc_p); with the pumps stopped nothing
        carries the heat away and it climbs by Q/(M·c_p) per second. Q is the GPUs' heat and
        as much of the hosts' as their parts can still pass to water this warm.
        """
        rack.liquid_supply_c = loop.supply_c
        rack.flow_lpm = loop.flow_lpm / max(1, len(loop.racks))
        heat_kw = _liquid_heat_kw(rack)
        rack.liquid_heat_kw = heat_kw
        capacity_kj_k = rack.water_kg * WATER_CP_KJ_PER_KG_K
        conductance_kw_k = 2.0 * (rack.flow_lpm / 60.0) * WATER_CP_KJ_PER_KG_K
        if conductance_kw_k < 1e-6:
            rack.coolant_c += heat_kw * dt / capacity_kj_k
        else:
            steady = rack.liquid_supply_c + heat_kw / conductance_kw_k
            decay = math.exp(-dt * conductance_kw_k / capacity_kj_k)
            rack.coolant_c = steady + (rack.coolant_c - steady) * decay
        rack.coolant_c = min(BOIL_CLAMP_C, rack.coolant_c)
        rack.liquid_return_c = min(BOIL_CLAMP_C, 2.0 * rack.coolant_c - rack.liquid_supply_c)

    @staticmethod
    def _rack_power(rack: RackState) -> float:
        return RACK_OVERHEAD_W + sum(node.power_w() for node in rack.nodes)

    def _step_loop_return(self, loop: LoopState) -> None:
        heat_kw = sum(r.liquid_heat_kw for r in loop.racks)
        kg_s = loop.flow_lpm / 60.0
        # Heat actually carried to the CDU; with no flow it stays in the racks.
        loop.heat_kw = heat_kw if kg_s > 0 else 0.0
        if loop.racks:
            loop.return_c = sum(r.liquid_return_c for r in loop.racks) / len(loop.racks)
        else:
            loop.return_c = loop.supply_c

    def _step_facility(self, dt: float, chiller: bool) -> None:
        it = sum(r.power_w for r in self.racks.values())
        weather = max(0.5, 1.0 + 0.025 * (self.outdoor_c - 15.0))
        cooling = sum(r.power_w * COOLING_PER_W[r.rack.cooling] for r in self.racks.values())
        cooling *= weather * (1.4 if chiller else 1.0)
        losses = 0.06 * it + 20_000.0  # UPS and distribution losses, lighting, offices
        self.it_power_w, self.cooling_power_w = it, cooling
        self.total_power_w = it + cooling + losses
        self.it_energy_kwh += it * dt / 3.6e6
        self.total_energy_kwh += self.total_power_w * dt / 3.6e6

    # -- readings ----------------------------------------------------------------------------

    def node_reading(self, name: str, ts: float, with_info: bool) -> Reading:
        node = self.nodes[name]
        rack = self.racks[node.rack.name]
        return node.reading(ts, rack.inlet_c, rack.outlet_c, with_info)


def _liquid_heat_kw(rack: RackState) -> float:
    """Heat the rack's servers give its water now (the rest, and the switches', leaves
    with the air)."""
    capture = host_capture(rack.coolant_c)
    parts_w = sum(node.gpu_power_w() + capture * node.host_power_w() for node in rack.nodes)
    return liquid_share(rack) * parts_w / 1000.0


def liquid_share(rack: RackState) -> float:
    """Share of the rack's heat its liquid takes: its cooling type's, or, direct-liquid,
    its servers' own where they say it (`ServerSpec.liquid_share`)."""
    cooling = rack.rack.cooling
    own = rack.nodes[0].host.server.liquid_share if rack.nodes else None
    return own if cooling == "direct_liquid" and own is not None else LIQUID_SHARE[cooling]


def reset_gpu(node: VirtualNode, gpu: GpuModel) -> None:
    """An operator's `nvidia-smi -r` (the `gpu-reset` fault): a lost GPU is back on the bus,
    whatever took it off (a thermal trip, an XID 79 fault); a hot one trips again."""
    gpu.reset()
    node.lost_until.pop(gpu.index, None)
    node.tripped_at.pop(gpu.index, None)
    node.pending_events.append(
        {"ts": time.time(), "gpu": gpu.index, "kind": GPU_RESET, "detail": "nvidia-smi -r"}
    )


def fell_off_the_bus_events(gpu: int, ts: float) -> list[dict[str, Any]]:
    """The driver's XID 79, then the agent's `gpu_lost` as its next NVML read fails (the
    detail as agents/collectors/gpu.py words it: `GpuLost` names the failing call)."""
    return [
        {"ts": ts, "gpu": gpu, "kind": "xid", "code": 79, "detail": "GPU has fallen off the bus"},
        {"ts": ts, "gpu": gpu, "kind": "gpu_lost", "detail": f"GPU {gpu} is lost (utilization)"},
    ]
