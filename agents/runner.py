"""`fleet-agent run`: collectors on the tick, slow reads on the slow lane, batches to the outbox.

The fast tick runs on a thread of its own (`collect`), so a driver call that hangs cannot
freeze the uplink; if a tick's collection overruns, the ticker skips and counts the missed
ticks rather than queueing them. A collector that fails to set up is disabled and reported;
one that fails on a tick is reported (once per distinct error) and asked again next time.
SIGTERM: stop ticking, try to deliver what is spooled for `flush_timeout_s`, exit 0;
whatever is not delivered is on disk for the next start.

Samples and events are stamped by one `AgentClock`: timestamps never run backwards, a
wall clock stepped back a little is slewed, and every step is reported once as a `note`
event in the next batch (agents/clock.py, docs/protocol.md "Time and clocks").

A facility agent (source `site:<slug>`, `[[facility.targets]]` in its file) runs the
facility poller instead of the node collectors, and ticks at its targets' cadence. It
refuses to start when a target feeds a rack, feed or loop its site's inventory lacks
(`inventory_problems`): the server would refuse every one of its batches for it.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import signal
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agents import __version__
from agents.clock import AgentClock
from agents.collectors.base import Collector, NotPresent, Reading, SlowRead
from agents.enroll import EnrollError, read_token
from agents.log import get_logger
from agents.outbox import Outbox
from agents.protocol import cadence
from agents.protocol.metrics import METRICS
from agents.runconfig import AgentConfig, ConfigError, config_from_args
from agents.schedule import SlowLane, Ticker, merge_slow
from agents.spool import SpoolSettings
from agents.uplink import UplinkSettings

log = get_logger("agents.runner")

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_REJECTED = 3

_METRIC_NAMES = frozenset(m.name for metrics in METRICS.values() for m in metrics)


class CollectorSet:
    """The enabled collectors and the bookkeeping that keeps one failure from stopping the rest."""

    def __init__(self, collectors: list[Collector], interval_s: float) -> None:
        self.interval_s = interval_s
        self.active: list[Collector] = []
        # (collector, error) from setup, sent with the first tick and stamped with its time.
        self._startup_errors: list[tuple[str, str]] = []
        self._last_error: dict[str, str] = {}
        for collector in collectors:
            try:
                collector.setup()
                self.active.append(collector)
            except NotPresent as exc:  # nothing to read on this machine: normal, not an error
                log.info("collector not used here", collector=collector.name, why=str(exc))
            except Exception as exc:  # a plugin may fail in any way: report it, carry on
                self._report(collector.name, f"disabled: {type(exc).__name__}: {exc}")
                log.warning("collector disabled", collector=collector.name, error=str(exc))
        # Fields that come every N > 1 ticks (a slow read, a collector with a longer cadence),
        # by the ticks between them: declared in the batch's `cadence` (`fields_s`), so the
        # server does not take a field read every 300 ticks for one that stopped.
        self._field_every: dict[str, int] = {}
        self._declared: dict[str, dict[str, float]] = {}  # a collector's own `fields_s`
        self._fields_lock = threading.Lock()
        self.fields_version = 0  # bumped when `_field_every` changes
        reads: list[SlowRead] = []
        for collector in self.active:
            slow_reads = getattr(collector, "slow_reads", None)
            if slow_reads is not None:
                reads.extend(self._noting(read) for read in slow_reads())
        self.lane = SlowLane(reads)
        self._every = {
            c.name: max(1, round(getattr(c, "interval_s", interval_s) / interval_s))
            for c in self.active
        }

    def collect(self, ts: float, tick: int) -> Reading:
        reading = Reading()
        reading.events.extend(_error_event(name, error, ts) for name, error in self._startup_errors)
        self._startup_errors = []
        for collector in self.active:
            if tick % self._every[collector.name]:
                continue
            try:
                collected = collector.collect(ts)
                if self._every[collector.name] > 1:
                    self._note(collected, self._every[collector.name])
                reading.merge(collected)
            except Exception as exc:
                self._error(reading, collector.name, f"{type(exc).__name__}: {exc}", ts)
            else:
                self._last_error.pop(collector.name, None)
            self._take_declared(collector)
        self.lane.submit_due(tick, ts)
        for slow in self.lane.harvest():
            merge_slow(reading, slow)
        for name, error in list(self.lane.failures.items()):
            del self.lane.failures[name]
            self._error(reading, name, error, ts)
        return reading

    def fields_s(self) -> dict[str, float]:
        """Each field that comes less often than every tick, and its interval (s): from the
        slow reads and slower collectors seen so far, and what collectors declare (a
        facility poller's slower targets)."""
        with self._fields_lock:
            out = {name: every * self.interval_s for name, every in self._field_every.items()}
            for declared in self._declared.values():
                for name, seconds in declared.items():
                    out[name] = max(seconds, out.get(name, 0.0))
        return out

    def _take_declared(self, collector: Collector) -> None:
        declared = getattr(collector, "fields_s", None)
        if not isinstance(declared, dict) or declared == self._declared.get(collector.name, {}):
            return
        with self._fields_lock:
            self._declared[collector.name] = dict(declared)
            self.fields_version += 1

    def _noting(self, read: SlowRead) -> SlowRead:
        """The slow read, noting which fields it brings (on the slow lane's thread)."""

        def noted(now: float) -> Reading:
            reading = read.read(now)
            self._note(reading, read.every_ticks)
            return reading

        return dataclasses.replace(read, read=noted)

    def _note(self, reading: Reading, every: int) -> None:
        names = {
            name
            for samples in reading.samples.values()
            for sample in samples
            for name in sample
            if name in _METRIC_NAMES
        }
        with self._fields_lock:
            changed = [n for n in names if self._field_every.get(n, 0) < every]
            for name in changed:
                self._field_every[name] = every
            if changed:
                self.fields_version += 1

    def close(self) -> None:
        self.lane.close()
        for collector in self.active:
            try:
                collector.close()
            except Exception as exc:
                log.warning(
                    "collector did not close cleanly", collector=collector.name, error=str(exc)
                )

    def _error(self, reading: Reading, name: str, error: str, ts: float) -> None:
        if self._last_error.get(name) == error:
            return  # already reported; say it again only when it changes
        self._last_error[name] = error
        log.warning("collector failed", collector=name, error=error)
        reading.events.append(_error_event(name, error, ts))

    def _report(self, name: str, error: str) -> None:
        self._last_error[name] = error
        self._startup_errors.append((name, error))


def _error_event(name: str, error: str, ts: float) -> dict[str, Any]:
    # The tick's time, from the agent's clock like the samples (never the raw wall clock).
    return {
        "ts": ts,
        "kind": "collector_error",
        "detail": f"{name}: {error}"[:500],
    }


class AgentRunner:
    def __init__(
        self,
        config: AgentConfig,
        collectors: CollectorSet,
        outbox: Outbox,
        clock: AgentClock | None = None,
    ) -> None:
        self.config = config
        self.collectors = collectors
        self.outbox = outbox
        self.clock = clock if clock is not None else AgentClock()
        self.ticker = Ticker(config.interval_s, wall=self.clock.now)
        self.ticks = 0
        self._fields_declared = 0  # the collectors' fields_version the outbox declares
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> int:
        self.outbox.start()
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="collect")
        ticking = asyncio.create_task(self._tick_loop(pool))
        stopping = asyncio.create_task(self._stop.wait())
        await asyncio.wait({ticking, stopping}, return_when=asyncio.FIRST_COMPLETED)
        ticking.cancel()
        stopping.cancel()
        await asyncio.gather(ticking, return_exceptions=True)
        delivered = await self.outbox.close(self.config.flush_timeout_s)
        pool.shutdown(wait=False, cancel_futures=True)
        self.collectors.close()
        log.info(
            "agent stopped",
            ticks=self.ticks,
            ticks_skipped=self.ticker.skipped,
            delivered_all=delivered,
            spooled=len(self.outbox.spool),
        )
        return EXIT_REJECTED if self.outbox.rejected else 0

    async def _tick_loop(self, pool: ThreadPoolExecutor) -> None:
        loop = asyncio.get_running_loop()
        async for ts in self.ticker.ticks():
            if self.outbox.rejected:
                self._stop.set()
                return
            stamp = round(ts, 3)
            try:
                reading = await loop.run_in_executor(
                    pool, self.collectors.collect, stamp, self.ticks
                )
            except Exception as exc:  # a bug of ours: log it, keep the agent alive
                log.error("tick failed", exc_info=True, error=str(exc))
                continue
            reading.events.extend(self.clock.take_notes())  # wall clock steps, once each
            if self.ticks == 0 and not self.config.is_site():
                # Only a node describes itself: the server refuses node_info from a site.
                reading.node_info = {
                    "hostname": socket.gethostname(),
                    "agent_version": __version__,
                    **reading.node_info,
                }
            self.outbox.ticks_skipped = self.ticker.skipped
            if self.collectors.fields_version != self._fields_declared:
                self._fields_declared = self.collectors.fields_version
                fields = self.collectors.fields_s()
                self.outbox.cadence = cadence(self.config.interval_s, fields_s=fields)
            self.outbox.submit(reading)
            self.ticks += 1


def agent_collectors(config: AgentConfig) -> list[Collector]:
    """A node agent's collectors, or a facility agent's: its targets' poller and plugins.

    A `site:` source may write only site samples, and the server refuses a whole batch
    (and the agent's token) for one gpu or node sample, so a facility agent does not run
    the node collectors. Raises ConfigError (a bad target table too) or PluginError.
    """
    from agents.collectors.registry import build_collectors, load_plugins
    from agents.facility.config import TargetConfigError
    from agents.facility.targets import build_collectors as facility_collectors

    source = config.resolved_source()
    if not config.is_site():
        if config.facility_targets:
            raise ConfigError(
                f"[[facility.targets]] are polled by a facility agent, not {source}: "
                'set source = "site:<site slug>" and enrol as that source'
            )
        return build_collectors(config)
    try:
        collectors = facility_collectors(config.facility_targets) + load_plugins(config)
    except TargetConfigError as exc:
        raise ConfigError(str(exc)) from None
    if not collectors:
        raise ConfigError(
            f"{source} has nothing to poll: add [[facility.targets]] (docs/facility.md)"
        )
    return collectors


def tick_interval(config: AgentConfig, collectors: list[Collector]) -> float:
    """A facility agent ticks at its shortest target cadence (the poller waits for most of
    a cadence on slow devices; ticking faster would only count skipped ticks)."""
    if not config.is_site():
        return config.interval_s
    cadences = [getattr(c, "interval_s", config.interval_s) for c in collectors]
    return max(config.interval_s, min(cadences, default=config.interval_s))


def inventory_problems(config: AgentConfig, token: str, collectors: list[Collector]) -> list[str]:
    """A facility agent's targets whose `feeds` its site's inventory lacks, one line each.

    The server refuses a whole site batch for one unknown rack, feed or loop, so such a
    target would lose every target's data on every tick: better not to start. When the
    inventory cannot be read (server down, older backend) the agent starts anyway, with a
    warning: the spool and the reconnect logic are there for a server that is away.
    """
    if not config.is_site():
        return []
    from agents.facility.inventory_check import InventoryUnavailable, check_site_inventory

    try:
        return check_site_inventory(config.server, token, collectors)
    except InventoryUnavailable as exc:
        log.warning(
            "inventory check skipped: the targets' feeds were not checked against the "
            "site's inventory",
            error=str(exc),
        )
        return []


def build_outbox(config: AgentConfig, token: str, clock: AgentClock | None = None) -> Outbox:
    source = config.resolved_source()
    settings = UplinkSettings(
        server=config.server,
        token=token,
        source=source,
        http_fallback=config.http_fallback,
        backoff_cap_s=config.backoff_cap_s,
    )
    spool = SpoolSettings(max_bytes=int(config.spool_max_mb * 1024 * 1024))
    # One batch per tick: the agent samples and sends every `interval_s` (for a facility
    # agent, its shortest target cadence: `tick_interval`).
    declared = cadence(config.interval_s)
    if clock is None:
        return Outbox(source, config.spool_dir, settings, spool, cadence=declared)
    return Outbox(source, config.spool_dir, settings, spool, clock=clock.now, cadence=declared)


def run_command(args: argparse.Namespace) -> int:
    try:
        config = config_from_args(args)
        if not config.server:
            raise ConfigError(
                "no server: set `server` in the config, FLEET_AGENT_SERVER or --server"
            )
        token = read_token(Path(config.token_file))
    except (ConfigError, EnrollError) as exc:
        print(f"fleet-agent: {exc}")
        return EXIT_USAGE
    from agents.collectors.registry import PluginError

    try:
        built = agent_collectors(config)
    except (ConfigError, PluginError) as exc:
        print(f"fleet-agent: {exc}")
        return EXIT_USAGE
    unknown = inventory_problems(config, token, built)
    if unknown:
        for line in unknown:
            print(f"fleet-agent: {line}")
        return EXIT_USAGE
    config = dataclasses.replace(config, interval_s=tick_interval(config, built))
    collectors = CollectorSet(built, config.interval_s)
    clock = AgentClock()
    runner = AgentRunner(config, collectors, build_outbox(config, token, clock), clock)
    log.info(
        "agent starting",
        version=__version__,
        source=config.resolved_source(),
        server=config.server,
        collectors=[c.name for c in collectors.active],
        interval_s=config.interval_s,
    )

    async def main() -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, runner.stop)
        return await runner.run()

    return asyncio.run(main())
