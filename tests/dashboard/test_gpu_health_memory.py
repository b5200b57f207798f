"""The memory facts the agent sends, where a person reads them: a GPU past the retired-pages
limit is listed to replace with its evidence and a link to its source; its GPU page gives
each count, an H200's page retirement reads "not supported" (an older agent's "not reported
by the agent", a 0 is 0); the RMA CSV carries the counts and the resets."""

from __future__ import annotations

import csv
import io
import time
from typing import Any

import pytest

from dashboard import gpu_health
from fleet.health import record as hr
from fleet.models import GPU
from tests.support import people
from tests.support.databases import T
from tests.support.health_seed import Place, event, latest, site_with_gpus
from tests.support.pages import fold, text
from tests.support.roles import person, signed_in

pytestmark = pytest.mark.django_db
fast_passwords = people.fast_passwords  # autouse

NOW = T + 3600.0


def sent(gpu: GPU, block: dict[str, Any]) -> None:
    GPU.objects.filter(pk=gpu.pk).update(info={**gpu.info, "memory_errors": block})


@pytest.fixture
def place(monkeypatch: pytest.MonkeyPatch) -> Place:
    """GPU 0: 70 pages retired, reset twice by its agent (replace); GPU 1: an H200's answers
    (aggregate 0, page retirement not supported); GPU 2: an older agent's (nothing sent)."""
    monkeypatch.setattr(gpu_health, "clock", lambda: NOW)
    monkeypatch.setattr(time, "time", lambda: NOW)  # the GPU page reads the clock itself
    p = site_with_gpus(per_node=3)
    worn, h200, _old = p.gpus
    sent(
        worn,
        {
            "ecc_sbe_agg_total": 9_120,
            "ecc_dbe_agg_total": 52,
            "retired_pages_sbe": 18,
            "retired_pages_dbe": 52,
            "retired_pages_pending": 0,
        },
    )
    event(worn, T + 60, kind="gpu_reset")
    event(worn, T + 1200, kind="driver_reload")
    sent(
        h200,
        {
            "ecc_sbe_agg_total": 0,
            "ecc_dbe_agg_total": 0,
            "retired_pages_sbe": "not_supported",
            "retired_pages_dbe": "not_supported",
            "retired_pages_pending": "not_supported",
        },
    )
    return p


def viewer() -> Any:
    return signed_in(person("sam", s1="viewer"))


def test_a_gpu_past_the_retired_pages_limit_is_listed_to_replace(place: Place) -> None:
    response = viewer().get("/health/")
    page = response.content.decode()
    act_on = page.split('id="act-on-')[1].split("</table>")[0]
    worn = place.gpus[0]
    assert f'data-gpu="{worn.id}" data-state="replace"' in act_on
    words = fold(text(response))
    assert "63 or more pages retired (NVIDIA's DCGM fails the GPU)" in words
    assert "70 pages retired (52 for double-bit errors)" in words
    assert f'href="{hr.SOURCES["retired-pages-limit"]}"' in act_on


def _health(gpu: GPU, client: Any) -> str:
    page = client.get(f"/gpus/{gpu.id}/").content.decode()
    return fold(page.split('id="gpu-health"')[1].split("</section>")[0])


def test_the_gpu_page_tells_not_supported_from_not_reported_and_zero(place: Place) -> None:
    worn, h200, old = place.gpus
    client = viewer()
    theirs = _health(worn, client)
    assert "Retired pages, double-bit 52" in theirs
    assert "ECC single-bit, aggregate 9,120" in theirs
    assert "Resets and driver reloads, 30 days 2" in theirs
    mine = _health(h200, client)
    assert "ECC double-bit, aggregate 0" in mine
    assert "Retired pages, single-bit not supported" in mine
    assert "Page retirement pending not supported" in mine
    theirs = _health(old, client)
    assert "Retired pages, single-bit not reported by the agent" in theirs
    assert "ECC double-bit, aggregate not reported by the agent" in theirs


def test_the_rma_csv_carries_the_counts_and_the_resets(place: Place) -> None:
    answer = viewer().get("/health/?format=csv")
    rows = list(csv.reader(io.StringIO(answer.content.decode())))
    assert tuple(rows[0]) == gpu_health.CSV_COLUMNS
    [worn] = [dict(zip(rows[0], row, strict=True)) for row in rows[1:]]
    assert worn["state"] == "replace"
    assert (
        worn["ecc_sbe_aggregate"],
        worn["ecc_dbe_aggregate"],
        worn["retired_pages_sbe"],
        worn["retired_pages_dbe"],
        worn["retired_pages_pending"],
        worn["resets_30d"],
    ) == ("9120", "52", "18", "52", "0", "2")
    assert hr.SOURCES["retired-pages-limit"] in worn["evidence"]


def test_the_csv_says_not_supported_and_leaves_not_reported_empty(place: Place) -> None:
    _worn, h200, old = place.gpus
    for gpu in (h200, old):  # make both GPUs to act on: a remap failure
        latest(gpu, T, remap_failure=1)
    rows = list(csv.reader(io.StringIO(viewer().get("/health/?format=csv").content.decode())))
    body = {r["gpu_index"]: r for r in (dict(zip(rows[0], row, strict=True)) for row in rows[1:])}
    assert body["1"]["retired_pages_dbe"] == "not supported"
    assert body["1"]["ecc_dbe_aggregate"] == "0"
    assert body["2"]["retired_pages_dbe"] == body["2"]["ecc_dbe_aggregate"] == ""
