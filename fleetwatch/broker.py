"""The embedded tier's broker: kombu's filesystem transport, with atomic writes.

kombu 5.7's filesystem `Channel._put` creates the message file under its final name and
then writes it, while `_get` moves and reads any file with that name without taking the
lock: a consumer can read a message before it is written, get an empty file, and the
worker dies with `JSONDecodeError` ("Unrecoverable error"). It happens under bursts (an
alert storm queueing many deliveries and retries). Here a message is written under a
name no consumer matches (`….msg.part`), closed, then renamed to its final name:
`os.replace` is atomic within a folder, so a consumer sees a whole message or none.

The exchange tables (which queue an exchange routes to) had the same flaw: `_queue_bind`
truncates or creates the table file and only then locks and writes it, so a producer's
`get_table` could read an empty file and fail to publish (seen in CI: a producer's
`JSONDecodeError` while a consumer declared its queue). Here a table is changed under an
exclusive lock on a side file and replaced whole, the same way.

Bindings are also remembered per process (kombu's `BrokerState` is global to the
transport class), and `queue_bind` skips the file when the process already knows the
binding. Two threads declaring the same queue could therefore publish before the first
one's file existed, and kombu drops a message with no queue to route to, silently. So a
process declares one binding at a time, and a table file that is missing falls back to
the bindings this process declared.

Registered as the `filesystem` transport when the Celery app is imported, so every
producer and worker of this project (and the tests' producers) use it.
"""

from __future__ import annotations

import fcntl
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem, virtual
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

Table = list[filesystem.exchange_queue_t]  # (routing key, pattern, queue)

__all__ = ("AtomicFilesystemTransport", "register")


_BINDING = threading.Lock()


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

    def queue_bind(self, *args: Any, **kwargs: Any) -> None:
        with _BINDING:  # until its table file is written, no other thread sees the binding
            super().queue_bind(*args, **kwargs)

    def get_table(self, exchange: str) -> Table:  # type: ignore[override]
        table: Table = super().get_table(exchange)
        if table or self._table_file(exchange).exists():
            return table
        with _BINDING:  # no file yet: what this process declared is still a binding
            known = (self.state.exchanges or {}).get(exchange, {}).get("table", [])
            return [filesystem.exchange_queue_t(*binding) for binding in known]

    def _queue_bind(  # type: ignore[override]
        self, exchange: str, routing_key: str, pattern: str, queue: str
    ) -> None:
        binding = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")

        def bind(table: Table) -> Table:
            return table if binding in table else [binding, *table]

        self._change_table(exchange, bind)

    def _delete(  # type: ignore[override]
        self, queue: str, exchange: str, routing_key: str, pattern: str, *args: Any, **kwargs: Any
    ) -> None:
        virtual.Channel._delete(self, queue, exchange, routing_key, pattern, *args, **kwargs)
        binding = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        self._change_table(exchange, lambda table: [b for b in table if b != binding])

    def _change_table(self, exchange: str, change: Callable[[Table], Table]) -> None:
        file = self._table_file(exchange)
        self.control_folder.mkdir(exist_ok=True)
        try:
            with _exclusive(file.with_name(file.name + ".lock")):
                table: Table = filesystem.Channel.get_table(self, exchange)
                changed = change(table)
                if changed == table:
                    return
                partial = file.with_name(f"{file.name}.{uuid.uuid4()}.part")
                partial.write_bytes(str_to_bytes(dumps(changed)))
                os.replace(partial, file)
        except OSError as exc:
            raise ChannelError(f"Cannot change the exchange table {file}") from exc

    def _table_file(self, exchange: str) -> Path:
        file: Path = self._exchange_file(exchange)  # type: ignore[attr-defined]  # validates
        return file


@contextmanager
def _exclusive(lock_file: Path) -> Iterator[None]:
    with open(lock_file, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


class AtomicFilesystemTransport(filesystem.Transport):
    Channel = AtomicChannel


def register() -> None:
    TRANSPORT_ALIASES["filesystem"] = "fleetwatch.broker:AtomicFilesystemTransport"
