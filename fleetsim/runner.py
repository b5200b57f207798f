"""Run the simulated fleet: one asyncio process, one `Outbox` (spool + uplink) per source.

Each virtual node enrols as `node:<name>` with its own token and WebSocket, exactly like a
real agent; the site's racks, feeds, loops and facility go out as `site:<slug>`. Faults that
belong to the agent rather than the hardware are played here:

- agent-crash: the node keeps drawing power but stops sampling; its uplink dies without a
  flush; on restart a new uplink drains the spool it left behind;
- network-partition: sampling goes on into the spool; the link is cut, then restored;
- node-offline: the node loses power: no samples, no link, a cold start afterwards.

The site batch is, by default, what the real facility collectors read from loopback devices
showing the model (SNMP PDUs, Redfish CDUs, Modbus meters; `fleetsim/devices.py`), every
`facility_interval_s`; with `site_devices=False` it is the model's readings, every tick.

With `jobs` on (`fleet-agent simulate` turns it on; `--no-jobs` off), a seeded schedule of
pods and Slurm jobs drives each GPU's load (fleetsim/jobs.py), and each node's batch carries
the `workloads` part its real collector reads from a fake `/proc`, fake NVML process lists, a
fake `scontrol` and a pod-resources server under `jobs_dir` (fleetsim/workloads.py).

With `fabric` on (the default; `--no-fabric` off), each node with GPUs has one InfiniBand
HCA per GPU in a fake sysfs tree under `fabric_dir`, which its real fabric collector reads
every 10 s into the batch's `fabric` part (fleetsim/fabric.py; the `ib-*` faults).

The virtual nodes share the host, so they share one `AgentClock`: read once per tick for
the samples' time, and a step of the host's wall clock is a note in every running node's
next batch, as each real agent on such a host would report it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

from agents.clock import AgentClock
from agents.collectors.base import Reading
from agents.enroll import EnrollError, enroll
from agents.log import get_logger
from agents.outbox import Outbox
from agents.protocol import cadence
from agents.schedule import Ticker
from agents.spool import SpoolSettings
from agents.uplink import UplinkSettings
from fleetsim.collectors import site_collectors, site_reading
from fleetsim.devices import SiteDevicePoll
from fleetsim.fabric import SimFabric
from fleetsim.faults import FaultPlan
from fleetsim.fleet import SiteModel
from fleetsim.inventory import Inventory
from fleetsim.jobs import JobSchedule
from fleetsim.workloads import SimWorkloads

log = get_logger("fleetsim")


@dataclass(slots=True)
class SimSettings:
    server: str
    enroll_token: str
    spool_root: Path
    interval_s: float = 1.0
    seed: int = 0
    spool_fsync: bool = False
    backoff_cap_s: float = 10.0
    enroll_concurrency: int = 8
    # The site batch from loopback devices through the facility collectors (as `make demo`
    # shows a real site), or, when False, straight from the model every tick.
    site_devices: bool = True
    # Facility devices are polled every few seconds in practice, not at the node tick.
    facility_interval_s: float = 5.0
    # Pods and Slurm jobs on the GPUs, seen through a fake /proc etc. under `jobs_dir`
    # (default: `jobs` beside the spool directories).
    jobs: bool = False
    jobs_dir: Path | None = None
    # Each node's InfiniBand ports as a fake sysfs tree the real fabric collector reads
    # (fleetsim/fabric.py), under `fabric_dir` (default: `sysfs` beside the spools).
    fabric: bool = True
    fabric_dir: Path | None = None


@dataclass(slots=True)
class VirtualAgent:
    source: str
    token: str
    outbox: Outbox | None = None
    state: str = "running"  # running | crashed | offline | partitioned
    needs_info: bool = True
    reenrol_after: float = 0.0  # monotonic time before which no new enrolment is tried


@dataclass(slots=True)
class SimStats:
    ticks: int = 0
    batches: int = 0
    agents: dict[str, str] = field(default_factory=dict)


class Simulator:
    def __init__(self, settings: SimSettings, inventory: Inventory, faults: FaultPlan) -> None:
        self.settings = settings
        self.inventory = inventory
        self.faults = faults
        schedule = JobSchedule(inventory.nodes, settings.seed) if settings.jobs else None
        self.model = SiteModel(inventory, faults, settings.seed, jobs=schedule)
        self.workloads: SimWorkloads | None = None
        self.fabric: SimFabric | None = None
        self.elapsed = 0.0
        self.site_collectors = site_collectors(self.model, settings.interval_s)
        self.devices: SiteDevicePoll | None = None
        if settings.site_devices:
            self.devices = SiteDevicePoll(self.model, settings.facility_interval_s)
        self.agents: dict[str, VirtualAgent] = {}
        self.site: VirtualAgent | None = None
        self.stats = SimStats()
        self.clock = AgentClock()
        self.ticker = Ticker(settings.interval_s, wall=self.clock.now)
        self._tasks: set[asyncio.Task[None]] = set()

    async def enroll_all(self) -> None:
        """Enrol every virtual node and the site, a few at a time."""
        gate = asyncio.Semaphore(self.settings.enroll_concurrency)

        async def one(source: str) -> VirtualAgent:
            async with gate:
                token = await asyncio.to_thread(
                    enroll, self.settings.server, self.settings.enroll_token, source
                )
            return VirtualAgent(source, token)

        sources = [f"node:{name}" for name in self.model.nodes]
        site_source = f"site:{self.inventory.site_slug}"
        enrolled = await asyncio.gather(*(one(s) for s in [site_source, *sources]))
        self.site = enrolled[0]
        self.agents = {a.source.partition(":")[2]: a for a in enrolled[1:]}
        log.info("simulator enrolled", nodes=len(self.agents), site=site_source)

    def _cadence(self, agent: VirtualAgent) -> dict[str, float]:
        """What each virtual source declares: a node samples and sends every tick; the
        site every device poll (`facility_interval_s`), or every tick when its batch comes
        straight from the model."""
        if agent is self.site and self.devices is not None:
            # Polls start on a tick, so they come no more often than the ticks do.
            return cadence(max(self.settings.facility_interval_s, self.settings.interval_s))
        return cadence(self.settings.interval_s)

    def _open(self, agent: VirtualAgent) -> Outbox:
        name = agent.source.replace(":", "_").replace("/", "_")
        settings = UplinkSettings(
            server=self.settings.server,
            token=agent.token,
            source=agent.source,
            backoff_cap_s=self.settings.backoff_cap_s,
        )
        outbox = Outbox(
            agent.source,
            self.settings.spool_root / name,
            settings,
            SpoolSettings(max_bytes=64 << 20, fsync=self.settings.spool_fsync),
            clock=self.clock.now,
            cadence=self._cadence(agent),
        )
        outbox.start()
        return outbox

    async def run(self, duration_s: float | None = None) -> SimStats:
        if self.site is None:
            await self.enroll_all()
        assert self.site is not None
        self.site.outbox = self._open(self.site)
        for agent in self.agents.values():
            agent.outbox = self._open(agent)
        try:
            if self.model.jobs is not None and self.workloads is None:
                jobs_dir = self.settings.jobs_dir or self.settings.spool_root / "jobs"
                self.workloads = SimWorkloads(self.model, jobs_dir, self.settings.interval_s)
                log.info("simulator runs jobs", jobs_dir=str(jobs_dir), seed=self.settings.seed)
            if self.settings.fabric and self.fabric is None:
                fabric_dir = self.settings.fabric_dir or self.settings.spool_root / "sysfs"
                self.fabric = SimFabric(
                    self.model, fabric_dir, self.settings.interval_s, self.settings.seed
                )
            if self.devices is not None:
                await self.devices.start()
            started = time.monotonic()  # fault times count from here, not from start-up
            async for ts in self.ticker.ticks():
                elapsed = self.elapsed = time.monotonic() - started
                self.model.step(self.settings.interval_s, elapsed, ts)
                if self.workloads is not None:
                    self.workloads.sync(elapsed)
                await self._apply_agent_faults(elapsed)
                self._reenrol_rejected()
                self._emit(round(ts, 3))
                self.stats.ticks += 1
                if duration_s is not None and elapsed >= duration_s:
                    break
        finally:
            await self.close()
            log.info(
                "simulator stopped",
                ticks=self.stats.ticks,
                ticks_skipped=self.ticker.skipped,
                batches=self.stats.batches,
                site_polls=self.devices.polls if self.devices else None,
                site_polls_skipped=self.devices.skipped if self.devices else None,
            )
        return self.stats

    def _emit(self, ts: float) -> None:
        notes = self.clock.take_notes()
        for name, agent in self.agents.items():
            if agent.outbox is None or agent.state in ("crashed", "offline"):
                continue
            # A rejected uplink still spools: after re-enrolment the spool goes out.
            agent.outbox.ticks_skipped = self.ticker.skipped
            reading = self.model.node_reading(name, ts, agent.needs_info)
            reading.events.extend(dict(note) for note in notes)
            if self.workloads is not None and self.workloads.due(name, self.stats.ticks):
                reading.merge(self.workloads.read(name, ts))
            if self.fabric is not None and self.fabric.due(name, self.stats.ticks):
                reading.merge(self.fabric.read(name, ts, self.elapsed))
            agent.outbox.submit(reading)
            agent.needs_info = False
            self.stats.batches += 1
        if self.devices is not None:
            self.devices.tick(ts, self._submit_site)
        else:
            self._submit_site(site_reading(self.site_collectors, ts))

    def _submit_site(self, reading: Reading) -> None:
        if self.site is not None and self.site.outbox is not None:
            self.site.outbox.ticks_skipped = self.ticker.skipped
            self.site.outbox.submit(reading)
            self.stats.batches += 1

    async def _apply_agent_faults(self, elapsed: float) -> None:
        for name, agent in self.agents.items():
            node = self.model.nodes[name]
            rack = node.rack.name
            if not node.powered:
                wanted = "offline"
            elif self.faults.active("agent-crash", name, elapsed):
                wanted = "crashed"
            elif self.faults.active("network-partition", name, elapsed) or self.faults.active(
                "network-partition", rack, elapsed
            ):
                wanted = "partitioned"
            else:
                wanted = "running"
            if wanted != agent.state:
                await self._transition(agent, wanted)

    async def _transition(self, agent: VirtualAgent, wanted: str) -> None:
        log.info("virtual agent state", source=agent.source, was=agent.state, now=wanted)
        if agent.state == "partitioned" and agent.outbox is not None:
            agent.outbox.resume_uplink()
        if wanted in ("crashed", "offline"):
            if agent.outbox is not None:
                await agent.outbox.close(flush_timeout_s=0.0)  # no goodbye: it just died
                agent.outbox = None
        elif wanted == "partitioned":
            if agent.outbox is None:
                agent.outbox = self._open(agent)
            await agent.outbox.pause_uplink()
        elif wanted == "running" and agent.outbox is None:
            agent.outbox = self._open(agent)  # a restart: drains what the last run spooled
            agent.needs_info = True
        agent.state = wanted
        self.stats.agents[agent.source] = wanted

    def _reenrol_rejected(self) -> None:
        """A token the server no longer knows (the demo database was reset, or someone
        enrolled the node elsewhere): enrol again, at most once a minute per source."""
        now = time.monotonic()
        for agent in [*self.agents.values(), self.site]:
            if agent is None or agent.outbox is None or not agent.outbox.rejected:
                continue
            if now < agent.reenrol_after:
                continue
            agent.reenrol_after = now + 60.0
            task = asyncio.create_task(self._reenrol(agent))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _reenrol(self, agent: VirtualAgent) -> None:
        try:
            token = await asyncio.to_thread(
                enroll, self.settings.server, self.settings.enroll_token, agent.source
            )
        except EnrollError as exc:
            log.error("re-enrolment failed", source=agent.source, error=str(exc))
            return
        log.info("re-enrolled after the server refused the token", source=agent.source)
        agent.token = token
        if agent.outbox is not None:
            await agent.outbox.close(flush_timeout_s=0.0)
            agent.outbox = self._open(agent)
            agent.needs_info = True
            if agent.state == "partitioned":
                await agent.outbox.pause_uplink()

    async def close(self, flush_timeout_s: float = 5.0) -> None:
        if self.devices is not None:
            await self.devices.stop(timeout_s=flush_timeout_s)  # its last poll goes out too
        outboxes = [a.outbox for a in [*self.agents.values(), self.site] if a and a.outbox]
        await asyncio.gather(*(o.close(flush_timeout_s) for o in outboxes))
        if self.workloads is not None:
            self.workloads.close()
            self.workloads = None
