"""The "GPUs to act on" page: a viewer of the site sees the GPU to replace and the one to
reset, each with its evidence and a link to its source, the GPU on watch apart, the healthy
ones nowhere; the CSV has the columns an RMA form asks for with the same GPUs; a viewer of
another site sees none of it; the GPU page shows the record. Sequences as in
tests/fleet/test_health_record.py."""

from __future__ import annotations

import csv
import io

import pytest
from django.test import Client

from dashboard import gpu_health
from fleet.health import record as hr
from tests.support import people
from tests.support.databases import T
from tests.support.health_seed import Place, counter_run, event, latest, minutes, site_with_gpus
from tests.support.pages import fold, text
from tests.support.roles import person, signed_in

pytestmark = pytest.mark.django_db
fast_passwords = people.fast_passwords  # autouse

NOW = T + 3600.0


@pytest.fixture
def place(monkeypatch: pytest.MonkeyPatch) -> Place:
    """gpu01: GPU 0 a remap failure (replace), GPU 1 a remap pending after XID 63 (reset
    needed); gpu02: GPU 0 fell off the bus once and was rebooted (watch), GPU 1 healthy."""
    monkeypatch.setattr(gpu_health, "clock", lambda: NOW)
    p = site_with_gpus(nodes=2, per_node=2)
    replace, reset, watch, healthy = p.gpus
    latest(replace, T, remap_failure=1, remap_pending=0, remapped_rows_uncorrectable=8)
    event(reset, T + 60, code=63)
    latest(reset, T + 120, remap_failure=0, remap_pending=1, remapped_rows_correctable=1)
    event(watch, T + 600, code=79)
    event(watch, T + 601, kind="gpu_lost")
    minutes(watch, counter_run(T + 300, 5, energy_j=9e6))
    minutes(watch, counter_run(T + 900, 5, energy_j=100.0))  # rebooted: back since
    latest(watch, T + 1200, remap_failure=0, remap_pending=0)
    latest(healthy, T + 1200, remap_failure=0, remap_pending=0, ecc_sbe_vol_total=2)
    from fleet.models import Site

    Site.objects.create(slug="north", name="North")
    return p


def viewer_of_site_1() -> Client:
    return signed_in(person("sam", s1="viewer"))


def test_the_gpus_to_replace_and_reset_are_listed_with_their_evidence(place: Place) -> None:
    client = viewer_of_site_1()
    response = client.get("/health/")
    assert response.status_code == 200
    page = response.content.decode()
    words = text(response)
    replace, reset, watch, healthy = place.gpus
    act_on = page.split('id="act-on-')[1].split("</table>")[0]
    assert f'data-gpu="{replace.id}" data-state="replace"' in act_on
    assert f'data-gpu="{reset.id}" data-state="reset needed"' in act_on
    assert f'data-gpu="{watch.id}"' not in act_on and f'data-gpu="{healthy.id}"' not in act_on
    # replace first, with NVIDIA's RMA criterion and a link to it
    assert act_on.index(f'data-gpu="{replace.id}"') < act_on.index(f'data-gpu="{reset.id}"')
    assert "row remap failure flag set" in words and "remap_failure = 1" in words
    assert f'href="{hr.SOURCES["remap-rma"]}"' in act_on
    assert "row remap pending: takes effect at the next GPU reset: remap_pending = 1" in words
    assert "serial 1652300000" in words
    watched = page.split('id="watch-')[1].split("</table>")[0]
    assert f'data-gpu="{watch.id}"' in watched
    assert "fell off the bus in the last 7 days" in fold(watched)
    assert "1 replace · 1 reset needed · 1 watch · 1 healthy" in words
    assert f'href="/nodes/{replace.node_id}/"' in page  # the node with GPUs to act on


def test_the_csv_has_what_an_rma_form_asks_for(place: Place) -> None:
    answer = viewer_of_site_1().get("/health/?format=csv")
    assert answer["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(answer.content.decode())))
    assert tuple(rows[0]) == gpu_health.CSV_COLUMNS
    body = [dict(zip(rows[0], row, strict=True)) for row in rows[1:]]
    assert [(r["node"], r["gpu_index"], r["state"]) for r in body] == [
        ("s1-gpu01", "0", "replace"),
        ("s1-gpu01", "1", "reset needed"),
    ]
    first = body[0]
    assert (first["serial"], first["uuid"], first["model"]) == (
        "1652300000",
        "GPU-s1-0-0",
        "NVIDIA H100 80GB HBM3",
    )
    assert first["pci_bus_id"] == "00000000:18:00.0"
    assert "remap_failure = 1" in first["evidence"]
    assert hr.SOURCES["remap-rma"] in first["evidence"]
    second = body[1]
    assert second["first_seen_utc"] == second["last_seen_utc"] == "2027-01-15 08:01 UTC"


def test_a_viewer_of_another_site_sees_none_of_it(place: Place) -> None:
    client = signed_in(person("vic", north="viewer"))
    page = text(client.get("/health/"))
    assert "North" in page and "s1-gpu01" not in page
    assert client.get(f"/health/?site={place.site.id}").status_code == 404
    assert client.get(f"/health/?site={place.site.id}&format=csv").status_code == 404
    listed = client.get("/health/?format=csv").content.decode().strip().splitlines()
    assert listed == [",".join(gpu_health.CSV_COLUMNS)]


def test_the_gpu_page_shows_the_record(place: Place, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setattr(time, "time", lambda: NOW)  # the GPU page reads the clock itself
    reset = place.gpus[1]
    response = viewer_of_site_1().get(f"/gpus/{reset.id}/")
    page = response.content.decode()
    health = fold(page.split('id="gpu-health"')[1].split("</section>")[0])
    assert "reset needed" in health
    assert "drain it, then reset the GPU" in health
    assert "Row remap pending yes" in health
    assert "ECC double-bit, aggregate not reported by the agent" in health
    assert "63 1 2027-01-15 08:01 UTC" in health  # XID 63 since the last reset


def test_the_page_is_in_the_navigation(place: Place) -> None:
    page = viewer_of_site_1().get("/health/").content.decode()
    assert '<a href="/health/" aria-current="page">GPU health</a>' in page
