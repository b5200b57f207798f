from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.stub_server import StubBackend


@pytest.fixture
def backend() -> Iterator[StubBackend]:
    server = StubBackend()
    server.start()
    yield server
    server.stop()
