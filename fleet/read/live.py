"""Live updates to browsers: the one place that names Channels groups, and the
publisher that feeds them.

Each ingest child reports which entities' latest state it saved (CHANGED frames);
the `LivePublisher` of the server process coalesces those reports, reads the
affected racks' latest state once per interval (`fleet.read.payloads.build_updates`, which
derives every figure and level through `fleet.health`) and sends them to:

- `live.site.<site id>`: per rack summaries of that site, its loops and facility figures;
- `live.rack.<rack id>`: that rack with its nodes, each GPU, its feeds and liquid (pages
  that render it themselves: node, GPU);
- `live.rack.<rack id>.changed`: `{"ts"}` only, that something of the rack changed (the
  rack page, which the server renders again itself: it costs the publisher no figures);
- `live.fleet`: a compact fleet summary (per site: racks by level, GPUs throttling).

A publish that fails (Redis away, a slow layer) is logged, counted and dropped:
it never touches ingest, and the next interval publishes the then-current state,
so pages resume by themselves when the layer returns.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from channels.layers import get_channel_layer

log = logging.getLogger("fleet.read.live")

LIVE_UPDATE = "live.update"  # the consumer method `live_update`
SEND_TIMEOUT_S = 2.0
# Every site's strip (alerts firing, agents stale: figures that move without its facility
# reporting) is refreshed with a publish at least this often while data flows.
SITE_REFRESH_S = 10.0
LOG_EVERY_S = 60.0


def fleet_group() -> str:
    return "live.fleet"


def site_group(site_id: int) -> str:
    return f"live.site.{site_id}"


def rack_group(rack_id: int) -> str:
    return f"live.rack.{rack_id}"


def rack_changed_group(rack_id: int) -> str:
    return f"live.rack.{rack_id}.changed"


Changed = dict[str, set[tuple[int, ...]]]


@dataclass
class PublisherCounters:
    published: int = 0
    failed: int = 0
    build_failed: int = 0


@dataclass
class LivePublisher:
    interval_s: float = 0.5
    pending: Changed = field(default_factory=dict)
    counters: PublisherCounters = field(default_factory=PublisherCounters)
    _wake: asyncio.Event | None = None
    _task: asyncio.Task[None] | None = None
    _logged_at: float = 0.0
    _sites_refreshed_at: float = 0.0

    def note_changed(self, changed: dict[str, list[list[int]]]) -> None:
        """Called by ingest links (never blocks): remember what moved, wake the loop."""
        for kind, keys in changed.items():
            self.pending.setdefault(kind, set()).update(tuple(k) for k in keys)
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = asyncio.ensure_future(self._run())
        if self._wake is not None:
            self._wake.set()

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            changed, self.pending = self.pending, {}
            if changed:
                await self.publish(changed)
            await asyncio.sleep(self.interval_s)  # coalesce: at most one publish per interval

    async def publish(self, changed: Changed) -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        loop = asyncio.get_running_loop()
        refresh_sites = time.monotonic() - self._sites_refreshed_at >= SITE_REFRESH_S
        if refresh_sites:
            self._sites_refreshed_at = time.monotonic()
        try:
            plan = await loop.run_in_executor(_reader(), _plan, changed, refresh_sites)
            wanted = await watched(layer, plan.groups())
            if not wanted:
                return  # nobody watches these: no reads, no figures, no sends
            updates = await loop.run_in_executor(_reader(), _build, plan, wanted)
        except Exception as exc:  # a page update is never worth a crash
            self.counters.build_failed += 1
            self._log_failure("could not build live updates", exc)
            return
        for group, payload in updates:
            try:
                message = {"type": LIVE_UPDATE, "update": payload}
                await asyncio.wait_for(layer.group_send(group, message), SEND_TIMEOUT_S)
                self.counters.published += 1
            except Exception as exc:  # Redis away: drop this interval's pushes
                self.counters.failed += 1
                self._log_failure("live publish failed; dropped until the layer answers", exc)
                return

    def _log_failure(self, what: str, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_S:
            self._logged_at = now
            log.warning(
                "%s: %r (failed publishes so far: %d, failed builds: %d)",
                what,
                exc,
                self.counters.failed,
                self.counters.build_failed,
            )


def _plan(changed: Changed, refresh_sites: bool = False) -> Any:
    """Runs on the publisher's own thread, with a Django connection of its own, kept
    open between publishes (reopening it twice a second cost ~3 % of the server's CPU).
    `refresh_sites`: every site's strip too, as if its facility had reported."""
    from django.db import connection

    from fleet.read.payloads import plan_updates

    if connection.connection is not None and not connection.is_usable():
        connection.close()  # the database dropped it (a restart): the next query reopens
    try:
        if refresh_sites:
            with connection.cursor() as cur:
                cur.execute("SELECT id FROM fleet_site")
                sites = {(site_id,) for (site_id,) in cur.fetchall()}
            changed = {**changed, "facility": changed.get("facility", set()) | sites}
        return plan_updates(changed)
    except Exception:
        connection.close()
        raise


def _build(plan: Any, wanted: set[str]) -> list[tuple[str, dict[str, Any]]]:
    from fleet.read.payloads import build_updates

    return build_updates(plan, wanted, time.time())


# Every group's member count in one round trip per Redis shard: a publish at 10,000 GPUs
# asks about ~1,000 groups, and one ZCARD each (awaited in turn) took ~14 % of a server's
# event loop in bench/scale.py's profile, more than acknowledging the batches.
_MEMBER_COUNTS = (
    "local out = {} for i, key in ipairs(KEYS) do out[i] = redis.call('ZCARD', key) end return out"
)


async def watched(layer: Any, groups: set[str]) -> set[str]:
    """The groups someone subscribes to, from the layer itself (in-memory: its table;
    Redis: the group's member set). A layer we cannot ask counts every group as watched."""
    members = getattr(layer, "groups", None)
    if isinstance(members, dict):  # InMemoryChannelLayer
        return {g for g in groups if members.get(g)}
    if hasattr(layer, "_group_key") and hasattr(layer, "consistent_hash"):  # channels_redis
        by_shard: dict[int, list[str]] = {}
        for group in sorted(groups):
            by_shard.setdefault(layer.consistent_hash(group), []).append(group)
        out: set[str] = set()
        for index, names in by_shard.items():
            keys = [layer._group_key(name) for name in names]
            counts = await asyncio.wait_for(
                _member_counts(layer.connection(index), keys), SEND_TIMEOUT_S
            )
            out.update(name for name, count in zip(names, counts, strict=True) if count)
        return out
    return set(groups)


async def _member_counts(connection: Any, keys: list[bytes]) -> list[int]:
    """ZCARD of each key in one round trip: a Lua call, or, where the server refuses
    scripts (an ACL without `@scripting`), one pipeline of ZCARDs."""
    from redis.exceptions import ResponseError

    try:
        return list(await connection.eval(_MEMBER_COUNTS, len(keys), *keys))
    except ResponseError:
        async with connection.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.zcard(key)
            return list(await pipe.execute())


@functools.cache
def _reader() -> ThreadPoolExecutor:
    """One thread for the publisher's reads: never a request's thread, never two at once."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="live-publisher")


_publisher: LivePublisher | None = None


def get_publisher() -> LivePublisher:
    global _publisher
    if _publisher is None:
        from django.conf import settings

        _publisher = LivePublisher(settings.LIVE_INTERVAL_S)
    return _publisher
