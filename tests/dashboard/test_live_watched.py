"""Which live groups have subscribers, asked of a real Redis channel layer (the services
tier): the publisher builds and sends only for those."""

from __future__ import annotations

import uuid

import pytest
from channels_redis.core import RedisChannelLayer
from redis.exceptions import ResponseError

from fleet.read.live import rack_group, watched
from tests.support import needs
from tests.support.services import services_redis_url

pytestmark = pytest.mark.services


@pytest.fixture
async def layer() -> RedisChannelLayer:
    # A prefix of its own, so nothing another test (or a running demo) subscribed counts.
    made = RedisChannelLayer(hosts=[services_redis_url()], prefix=f"fwtest{uuid.uuid4().hex[:8]}")
    yield made
    await made.flush()
    await made.close_pools()


async def test_only_groups_with_a_subscriber_are_watched(layer: RedisChannelLayer) -> None:
    channel = await layer.new_channel()
    await layer.group_add(rack_group(7), channel)
    groups = {rack_group(n) for n in range(1, 1001)}  # a 10,000-GPU fleet's racks, twice over

    assert await watched(layer, groups) == {rack_group(7)}


async def test_a_group_whose_last_subscriber_left_is_no_longer_watched(
    layer: RedisChannelLayer,
) -> None:
    channel = await layer.new_channel()
    await layer.group_add(rack_group(3), channel)
    await layer.group_discard(rack_group(3), channel)

    assert await watched(layer, {rack_group(3), rack_group(4)}) == set()


async def test_no_groups_asks_nothing(layer: RedisChannelLayer) -> None:
    assert await watched(layer, set()) == set()


async def test_a_redis_that_refuses_scripts_is_asked_with_a_pipeline(
    layer: RedisChannelLayer,
) -> None:
    # An ACL user without @scripting: EVAL is refused, the answer must not change.
    import redis.asyncio as aioredis

    admin = aioredis.Redis.from_url(services_redis_url())
    user, password = f"fwtest{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    try:
        await admin.execute_command(
            "ACL", "SETUSER", user, "on", f">{password}", "~*", "&*", "+@all", "-@scripting"
        )
    except ResponseError as exc:  # Redis before 6.2 has no ACLs (or no pub/sub rules)
        await admin.aclose()
        needs.missing(needs.SERVICES, f"this Redis cannot make a user without scripts: {exc}")
    try:
        url = services_redis_url().replace("redis://", f"redis://{user}:{password}@", 1)
        limited = RedisChannelLayer(hosts=[url], prefix=layer.prefix)
        channel = await layer.new_channel()
        await layer.group_add(rack_group(5), channel)

        assert await watched(limited, {rack_group(5), rack_group(6)}) == {rack_group(5)}
        await limited.close_pools()
    finally:
        await admin.execute_command("ACL", "DELUSER", user)
        await admin.aclose()
