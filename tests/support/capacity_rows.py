"""The capacity tests' hourly rack draw and their operator (tests/support/roles.py's cast):
the capacity page and its answer API read the same seeded hours."""

from __future__ import annotations

import time

from django.db import connection, transaction
from django.test import Client

from fleet.models import Rack
from tests.support.roles import person, signed_in

HOUR = 3600


def seed_hours(rack: str, watts: list[float]) -> None:
    """Hourly rack power means, one per whole hour before now, newest first."""
    rack_id = Rack.objects.get(name=rack).pk
    top = int(time.time() // HOUR) * HOUR - HOUR  # the last whole hour's start
    rows = [(rack_id, top - k * HOUR, 60, w) for k, w in enumerate(watts)]
    with transaction.atomic(), connection.cursor() as cur:
        cur.executemany(
            "INSERT INTO fw_rack_1h (rack_id, bucket, n, power_w_mean) VALUES (%s, %s, %s, %s)",
            rows,
        )


def operator_of_demo() -> Client:
    return signed_in(person("otto", demo="operator"))
