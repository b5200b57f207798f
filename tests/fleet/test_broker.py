"""The embedded tier's broker never hands a consumer a half-written message: a burst of
large messages written while a consumer drains the queue arrives whole, every one."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import cast

from kombu import Connection

import fleetwatch.celery  # noqa: F401  (registers the transport, as every process does)
from fleetwatch.broker import AtomicChannel, AtomicFilesystemTransport

MESSAGES = 300
EXCHANGES = 200
QUEUES_PER_EXCHANGE = 5
BODY = "x" * 200_000  # large, so a write takes long enough to be caught half-done


def connection(folder: Path) -> Connection:
    options = {
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "control_folder": str(folder / "control"),  # not the working directory's
    }
    return Connection("filesystem://", transport_options=options)


def test_filesystem_is_the_atomic_transport(tmp_path: Path) -> None:
    assert connection(tmp_path).transport_cls == "filesystem"
    assert isinstance(connection(tmp_path).transport, AtomicFilesystemTransport)


def test_a_burst_of_large_messages_read_while_written_arrives_whole(tmp_path: Path) -> None:
    received: list[int] = []
    errors: list[BaseException] = []
    done_writing = threading.Event()

    def consume() -> None:
        with connection(tmp_path) as conn:
            queue = conn.SimpleQueue("burst")
            try:
                while len(received) < MESSAGES:
                    try:
                        message = queue.get(timeout=0.01 if not done_writing.is_set() else 2)
                    except queue.Empty:
                        if done_writing.is_set():
                            return
                        continue
                    assert message.payload["body"] == BODY
                    received.append(message.payload["n"])
                    message.ack()
            except BaseException as exc:
                errors.append(exc)

    # A daemon, and told to stop however the writing ends: a failed put must fail this
    # test, not leave a thread that keeps pytest from exiting (a CI run hung on it).
    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    try:
        with connection(tmp_path) as conn:
            queue = conn.SimpleQueue("burst")
            for n in range(MESSAGES):
                queue.put({"n": n, "body": BODY})
    finally:
        done_writing.set()
    consumer.join(timeout=60)
    assert not errors, errors[0]
    assert sorted(received) == list(range(MESSAGES))


def test_a_producer_never_reads_a_half_written_exchange_table(tmp_path: Path) -> None:
    """Declaring a queue writes its exchange's table; a producer reading that table at the
    same moment gets the old table or the new one, never an empty file."""
    exchanges = [f"ex{n}" for n in range(EXCHANGES)]
    errors: list[BaseException] = []
    done = threading.Event()

    def read_tables() -> None:
        with connection(tmp_path) as conn:
            channel = cast(AtomicChannel, conn.default_channel)
            while not done.is_set():
                for exchange in exchanges:
                    try:
                        channel.get_table(exchange)
                    except BaseException as exc:
                        errors.append(exc)
                        return

    reader = threading.Thread(target=read_tables, daemon=True)
    reader.start()
    try:
        with connection(tmp_path) as conn:
            channel = cast(AtomicChannel, conn.default_channel)
            for exchange in exchanges:
                channel.exchange_declare(exchange, "direct")
                for queue in range(QUEUES_PER_EXCHANGE):
                    channel.queue_bind(f"{exchange}-q{queue}", exchange, f"key{queue}")
    finally:
        done.set()
        reader.join(timeout=30)
    assert not errors, errors[0]
    with connection(tmp_path) as conn:
        table = cast(AtomicChannel, conn.default_channel).get_table("ex0")
    assert sorted(binding.queue for binding in table) == [
        f"ex0-q{n}" for n in range(QUEUES_PER_EXCHANGE)
    ]
