"""The collector's policy on the ingest path (fleet/gc_policy.py): a settled process no
longer walks what it loaded at start, and collects young objects in larger batches."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fleet.gc_policy import YOUNG_THRESHOLD

PROBE = "import gc; print(gc.get_freeze_count(), gc.get_threshold()[0])"


def run_python(code: str) -> tuple[int, int]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "fleetwatch.settings"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    frozen, young = out.stdout.split()[-2:]
    return int(frozen), int(young)


@pytest.mark.process  # a fresh interpreter: the test process's own collector is left alone
def test_a_settled_process_freezes_its_startup_heap_and_spaces_young_collections() -> None:
    frozen, young = run_python(f"from fleet.gc_policy import settle_gc; settle_gc(); {PROBE}")
    assert frozen > 1_000  # the interpreter's and the imports' objects
    assert young == YOUNG_THRESHOLD


@pytest.mark.process
def test_a_plain_interpreter_keeps_its_own_defaults() -> None:
    # The oracle for the two tests beside it: without settling, nothing is frozen and the
    # young threshold is the interpreter's (700 on CPython 3.11-3.13; not assumed here).
    frozen, young = run_python(PROBE)
    assert frozen == 0
    assert young != YOUNG_THRESHOLD


@pytest.mark.process
def test_the_server_application_settles_the_collector_once_built() -> None:
    frozen, young = run_python(f"import fleetwatch.asgi; {PROBE}")
    assert frozen > 50_000  # Django, the URL map, the consumers: everything loaded at start
    assert young == YOUNG_THRESHOLD
