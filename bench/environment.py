"""How a bench process sets itself up: the settings every bench that starts a real server
runs under, and the faster event loop for the load generators."""

from __future__ import annotations

import os


def use_bench_settings() -> None:
    """Before Django is imported: the test settings, a key (settings require one outside
    the demo; this one guards nothing) and plain http, as the benches serve on loopback."""
    os.environ.setdefault("FLEETWATCH_TESTING", "1")
    os.environ.setdefault("SECRET_KEY", "bench-only-not-secret")
    os.environ.setdefault("FLEETWATCH_PLAIN_HTTP", "1")


def install_uvloop() -> None:
    """uvloop where it is installed: a load generator shares the cores with the servers
    it measures, and its own loop's overhead would count against them."""
    try:
        import uvloop
    except ImportError:
        return
    uvloop.install()
