"""Fleetwatch node agent: collectors, a tick schedule, a disk spool and the uplink.

Nothing under `agents/` imports Django or the backend packages: the agent ships alone.
"""

from __future__ import annotations

__version__ = "0.1.0"
