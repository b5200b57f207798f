"""What a test does when something it needs outside Python is missing: it skips, saying
what is missing, except where the run asks for that dependency (.ci/run sets all three),
where the test fails instead.

- REQUIRE_SERVICES=1: PostgreSQL, Redis (and the redis-server binary), nginx.
- REQUIRE_BROWSER=1: Debian's chromium.
- REQUIRE_PROMETHEUS=1: Debian's prometheus (prometheus, promtool)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

SERVICES = "REQUIRE_SERVICES"
BROWSER = "REQUIRE_BROWSER"
PROMETHEUS = "REQUIRE_PROMETHEUS"


def required(flag: str) -> bool:
    """Whether this run asks for the dependencies `flag` stands for."""
    return os.environ.get(flag) == "1"


def missing(flag: str, reason: str) -> NoReturn:
    """Skip the test for `reason`, or fail it where `flag`=1 asks for what is missing."""
    if required(flag):
        pytest.fail(f"{flag}=1 but {reason}", pytrace=False)
    pytest.skip(f"{reason} (set {flag}=1 to make that a failure)")
