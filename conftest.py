"""Root pytest configuration: the test settings flag must be set before Django loads."""

from __future__ import annotations

import os

os.environ.setdefault("FLEETWATCH_TESTING", "1")
