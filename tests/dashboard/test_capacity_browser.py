"""The capacity question in a real browser: an operator picks a rack, a number of servers
and a model in the capacity page's form, submits it, and reads the server's answer (the
form is plain HTML; the answer has a URL), then follows the site's headroom link to the
racks' table; saved as screenshots that must not be blank."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser_pages import login, server_with_ops, shot

pytestmark = pytest.mark.browser

HOUR = 3600


def test_the_form_answers_a_question_and_links_the_headroom_table(
    tmp_path: Path, browser: Any
) -> None:
    with server_with_ops(tmp_path / "srv", racks=1) as server:
        rack_id = server.query("SELECT id FROM fleet_rack WHERE name = 'A01'")[0][0]
        top = int(time.time() // HOUR) * HOUR - HOUR
        for k in range(24):  # 30 kW every hour of a day, of the demo's 45 kW budget
            server.execute(
                "INSERT INTO fw_rack_1h (rack_id, bucket, n, power_w_mean) VALUES (?, ?, 60, ?)",
                (rack_id, top - k * HOUR, 30e3),
            )
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        login(page, server)
        page.goto(server.url + "/capacity/")
        form = page.locator("#capacity-question form")
        form.locator("select[name=rack]").select_option(str(rack_id))
        form.locator("input[name=servers]").fill("2")
        form.locator("select[name=model]").select_option("HGX H200 8-GPU")
        form.locator("button[type=submit]").click()
        answer = page.locator("#capacity-question .answer")
        answer.wait_for()
        assert f"rack={rack_id}" in page.url and "servers=2" in page.url
        verdict = answer.locator(".verdict").inner_text()
        # 2 × 10.2 kW (rated: the demo's nodes have no hourly draw) on 30 of 45 kW
        assert verdict.startswith("No: A01 cannot take 2 more × HGX H200 8-GPU"), verdict
        assert "Binding: power budget, margin -5.4 kW (1 fit)" in verdict
        rows = answer.locator("tbody tr")
        names = [rows.nth(i).get_attribute("data-constraint") for i in range(rows.count())]
        assert names == ["power budget", "feed N+1", "CDU heat", "space"]
        assert answer.get_attribute("data-answer") == "no"
        assert form.locator("select[name=rack]").input_value() == str(rack_id)  # kept
        shot(page, tmp_path / "capacity-question.png")

        page.locator("a:has-text('Headroom by rack')").first.click()
        page.wait_for_selector("h1:has-text('Headroom by rack')")
        first = page.locator("table.headroom tbody tr").first
        assert first.get_attribute("data-rack") == str(rack_id)
        assert "power budget" in first.inner_text()
        shot(page, tmp_path / "capacity-headroom.png")
