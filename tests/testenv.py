"""Loaded with `-p tests.testenv` before pytest-django reads the settings."""

from __future__ import annotations

import os

os.environ.setdefault("FLEETWATCH_TESTING", "1")
