"""A minimal batch and the refusal it gets, shared by the validator's exactness and
limits tests."""

from __future__ import annotations

import time
from typing import Any

import pytest

from agents.protocol.validate import ProtocolError, validate_batch

NOW = time.time()


def batch(**extra: Any) -> dict[str, Any]:
    return {"protocol": 1, "source": "node:n1", "seq": 1, **extra}


def refused(obj: dict[str, Any]) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        validate_batch(obj, NOW)
    assert caught.value.code == 400
    return caught.value
