"""The alerts page in a real browser: an incident's folded members open on a click and stay
open while the page refreshes itself (every few seconds it fetches its region again and
morphs it in; the server renders folds closed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.browser_pages import login, server_with_ops

pytestmark = pytest.mark.browser

REFRESH_MS = 15_000  # a bound on a hang: the page refreshes every 5 s

# Six GPUs of A01 in thermal slowdown under CDU-1's open incident, as the engine files them.
INCIDENT = """
from django.utils import timezone
from fleet.alerts.models import AlertGroup, AlertInstance, AlertRule
from fleet.models import CoolingLoop, Node
loop = CoolingLoop.objects.get(name="CDU-1")
now = timezone.now()
group = AlertGroup.objects.create(
    key=f"loop:{loop.id}", site=loop.site, opened_at=now, title="CDU-1: no pump running"
)
rule = AlertRule.objects.get(key="gpu-hw-thermal-slowdown")
node = Node.objects.get(name="gpu-a01-01")
for index in range(6):
    AlertInstance.objects.create(
        rule=rule, scope="gpu", entity=f"{node.id}:{index}", state="firing", value=1.0,
        labels={"site": loop.site.name, "rack": "A01", "node": node.name, "gpu": str(index),
                "incident": group.key},
        site=loop.site, rack=node.rack, node=node, loop=loop, group=group,
        started_at=now, fired_at=now, updated_at=now,
    )
print(group.pk)
"""


def test_an_opened_fold_stays_open_across_the_pages_refresh(tmp_path: Path, browser: Any) -> None:
    with server_with_ops(tmp_path / "srv", racks=2) as server:
        group_pk = int(server.manage("shell", "-c", INCIDENT).strip().splitlines()[-1])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        login(page, server)
        page.goto(f"{server.url}/alerts/")
        incident = page.locator(f"#incident-{group_pk}")
        assert "CDU-1: no pump running" in incident.locator("h3").inner_text()
        fold = incident.locator("details").first
        assert "6 × HW thermal slowdown at A01 (6 firing)" in fold.locator("summary").inner_text()
        assert fold.get_attribute("open") is None
        assert not fold.locator("tr[data-alert]").first.is_visible()
        fold.locator("summary").click()
        assert fold.locator("tr[data-alert]").count() == 6
        assert fold.locator("tr[data-alert]").first.is_visible()
        before = page.locator("#as-of time").inner_text()
        page.wait_for_function(
            "t => document.querySelector('#as-of time').textContent !== t",
            arg=before,
            timeout=REFRESH_MS,
        )
        assert fold.get_attribute("open") is not None
        assert fold.locator("tr[data-alert]").first.is_visible()
