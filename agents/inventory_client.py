"""Reading a site's inventory from the backend (`GET /api/v1/inventory`).

One HTTP call shared by the simulator (with the site's enrolment token) and the
facility agent's target check (with its own `site:` token); each turns the error
into its own message.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from agents.protocol import HTTP_INVENTORY_PATH
from agents.uplink import http_url


class InventoryFetchError(Exception):
    """The inventory could not be read; `status` is the HTTP status when there was one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def get_inventory(server: str, token: str, timeout_s: float) -> Any:
    """The decoded inventory JSON; raises InventoryFetchError on any failure."""
    request = urllib.request.Request(
        http_url(server, HTTP_INVENTORY_PATH),
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        message = f"{server} answered HTTP {exc.code} to GET {HTTP_INVENTORY_PATH}"
        raise InventoryFetchError(message, exc.code) from None
    except (OSError, ValueError) as exc:
        raise InventoryFetchError(f"cannot read the inventory from {server}: {exc}") from None
