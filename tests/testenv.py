"""Loaded with `-p tests.testenv` before pytest-django reads the settings."""

from __future__ import annotations

import os

os.environ.setdefault("FLEETWATCH_TESTING", "1")
# Tests make many bad-token requests from 127.0.0.1 (the fuzzers); the tests of the
# failed-token limit set their own.
os.environ.setdefault("FLEETWATCH_AUTH_FAILURES_PER_MIN", "1000000")
# Secrets at rest (fleet/secrets.py): a fixed test key, so subprocesses read what tests wrote.
os.environ.setdefault("FLEETWATCH_SECRET_KEYS", "dGVzdHMtb25seS1mbGVldHdhdGNoLXNlY3JldC1rZXk=")
