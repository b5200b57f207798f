"""Roles in a real browser: a viewer signs in on Fleetwatch's page and reads the alerts
without acknowledge controls or webhook URLs; an operator acknowledges through the page;
the theme toggle switches to light and is remembered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.browser_pages import shot
from tests.support.server import FleetServer

pytestmark = pytest.mark.browser


WEBHOOK = "https://hooks.slack.com/services/T000/B000/sEcReTtOkEn1234"

# A viewer, an operator, one firing alert at rack A01 and a Slack route.
CAST = f"""
from django.contrib.auth.models import Group, User
from django.utils import timezone
from fleet.alerts.models import AlertInstance, AlertRule
from fleet.models import Site
from fleet.notifications.models import Route
for name, group in (("vic", "Viewers"), ("otto", "Operators")):
    User.objects.create_user(name, password="pw-" + name).groups.add(Group.objects.get(name=group))
now = timezone.now()
site = Site.objects.get()
AlertInstance.objects.create(
    rule=AlertRule.objects.get(key="gpu-hw-thermal-slowdown"), scope="gpu", entity="1:0",
    state="firing", value=1.0, site=site, started_at=now, fired_at=now, updated_at=now,
    labels={{"site": site.name, "rack": "A01", "node": "gpu-a01-01", "gpu": "0"}},
)
Route.objects.create(name="ops", webhook_url="{WEBHOOK}")
"""


SECOND = """
from django.utils import timezone
from fleet.alerts.models import AlertInstance, AlertRule
from fleet.models import Site
now = timezone.now()
site = Site.objects.get()
AlertInstance.objects.create(
    rule=AlertRule.objects.get(key="gpu-hw-thermal-slowdown"), scope="gpu", entity="1:1",
    state="firing", value=1.0, site=site, started_at=now, fired_at=now, updated_at=now,
    labels={"site": site.name, "rack": "A01", "node": "gpu-a01-01", "gpu": "1"},
)
"""


def sign_in(page, server: FleetServer, name: str) -> None:  # type: ignore[no-untyped-def]
    page.goto(server.url + "/alerts/")
    assert "/admin/login/" in page.url
    assert page.locator("h1").inner_text() == "Sign in to Fleetwatch"
    page.fill("#id_username", name)
    page.fill("#id_password", "pw-" + name)
    page.click("input[type=submit]")
    page.wait_for_selector("h1:has-text('Alerts')")


def test_a_viewer_reads_alerts_and_an_operator_acknowledges_them(
    tmp_path: Path, browser: Any
) -> None:
    with FleetServer.started(tmp_path / "srv", racks=2) as server:
        server.manage("shell", "-c", CAST)
        viewer = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
        sign_in(viewer, server, "vic")
        assert "1 firing" in viewer.locator("h1").inner_text()
        assert viewer.locator("tr[data-alert]").count() == 1
        assert viewer.locator("input[name=alert]").count() == 0
        assert viewer.locator("text=Acknowledge selected").count() == 0
        assert "hooks.slack.com" not in viewer.content()
        shot(viewer, tmp_path / "alerts-viewer.png")
        # The page is live: an alert that starts firing appears without a reload.
        viewer.evaluate("window.__stayed = true")
        server.manage("shell", "-c", SECOND)
        viewer.wait_for_function(
            "document.querySelectorAll('tr[data-alert]').length === 2", timeout=15_000
        )
        assert viewer.evaluate("window.__stayed === true")
        assert "2 firing" in viewer.locator("h1").inner_text()
        assert viewer.locator("#live-status").inner_text() == "live"

        # A wall screen: the system asks for dark, and the page follows it.
        wall = browser.new_context(viewport={"width": 1920, "height": 1080}, color_scheme="dark")
        operator = wall.new_page()
        sign_in(operator, server, "otto")
        assert "hooks.slack.com …1234" in operator.content()
        operator.check("tr[data-alert='1'] input[name=alert]")
        operator.fill("input[name=comment]", "swapping the pump")
        operator.click("text=Acknowledge selected")
        operator.wait_for_selector("text=1 alert(s) acknowledged")
        assert "otto: swapping the pump" in operator.locator("tr[data-alert='1']").inner_text()

        assert operator.locator("#theme-toggle").inner_text() == "☀ light theme"
        shot(operator, tmp_path / "alerts-operator-dark.png")
        operator.click("#theme-toggle")
        assert operator.evaluate("document.documentElement.dataset.theme") == "light"
        operator.reload()
        assert operator.evaluate("document.documentElement.dataset.theme") == "light"
        assert operator.locator("#theme-toggle").inner_text() == "☾ dark theme"
        shot(operator, tmp_path / "alerts-operator-light.png")
