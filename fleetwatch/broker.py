"""The embedded tier's broker: kombu's filesystem transport, with atomic writes.

kombu 5.7's filesystem `Channel._put` creates the message file under its final name and
then writes it, while `_get` moves and reads any file with that name without taking the
lock: a consumer can read a message before it is written, get an empty file, and the
worker dies with `JSONDecodeError` ("Unrecoverable error"). It happens under bursts (an
alert storm queueing many deliveries and retries). Here a message is written under a
name no consumer matches (`….msg.part`), closed, then renamed to its final name:
`os.replace` is atomic within a folder, so a consumer sees a whole message or none.

Registered as the `filesystem` transport when the Celery app is imported, so every
producer and worker of this project (and the tests' producers) use it.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

__all__ = ("AtomicFilesystemTransport", "register")


class AtomicChannel(filesystem.Channel):
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = final + ".part"  # `_get` only takes names ending in `<queue>.msg`
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class AtomicFilesystemTransport(filesystem.Transport):
    Channel = AtomicChannel


def register() -> None:
    TRANSPORT_ALIASES["filesystem"] = "fleetwatch.broker:AtomicFilesystemTransport"
