"""Loaded with `-p tests.testenv` before pytest-django reads the settings."""

from __future__ import annotations

import os

os.environ.setdefault("FLEETWATCH_TESTING", "1")
# Settings refuse to start without a key outside the demo (fleetwatch/settings.py); the
# suite's own, inherited by every server and worker it starts (tests/support/server.py).
os.environ.setdefault("SECRET_KEY", "fleetwatch-tests-only-not-secret")
# The test client and test servers speak plain http on loopback: the one switch for it.
os.environ.setdefault("FLEETWATCH_PLAIN_HTTP", "1")
# Tests make many bad-token requests from 127.0.0.1 (the fuzzers); the tests of the
# failed-token limit set their own.
os.environ.setdefault("FLEETWATCH_AUTH_FAILURES_PER_MIN", "1000000")
# Secrets at rest (fleet/secrets.py): a fixed test key, so subprocesses read what tests wrote.
os.environ.setdefault("FLEETWATCH_SECRET_KEYS", "dGVzdHMtb25seS1mbGVldHdhdGNoLXNlY3JldC1rZXk=")
