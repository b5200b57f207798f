"""The embedded tier's broker never hands a consumer a half-written message: a burst of
large messages written while a consumer drains the queue arrives whole, every one."""

from __future__ import annotations

import threading
from pathlib import Path

from kombu import Connection

import fleetwatch.celery  # noqa: F401  (registers the transport, as every process does)
from fleetwatch.broker import AtomicFilesystemTransport

MESSAGES = 300
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

    consumer = threading.Thread(target=consume)
    consumer.start()
    with connection(tmp_path) as conn:
        queue = conn.SimpleQueue("burst")
        for n in range(MESSAGES):
            queue.put({"n": n, "body": BODY})
    done_writing.set()
    consumer.join(timeout=60)
    assert not errors, errors[0]
    assert sorted(received) == list(range(MESSAGES))
