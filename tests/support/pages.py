"""Server-rendered pages in Django tests: the page as a reader sees it, and the site the
rack, cooling and overview page tests read (A01, A02 on CDU-1; A04 air-cooled)."""

from __future__ import annotations

import html as markup
import re
from dataclasses import replace
from typing import Any

import pytest

from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import GPU, CoolingLoop


def text(response: Any) -> str:
    """The page as a reader sees it: tags out, whitespace folded."""
    return fold(response.content.decode())


def fold(page: str) -> str:
    return markup.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


# A fixture a module binds to the name its tests take: `site = pages.rack_site`.


@pytest.fixture
def rack_site() -> None:
    """A01, A02 on CDU-1; A04 air-cooled; with the figures the page tests read (not the
    demo's)."""
    liquid = (replace(plan, nodes=2, budget_kw=130, feed_amps=125) for plan in DEMO_RACKS[:2])
    racks = (*liquid, replace(DEMO_RACKS[3], nodes=1))
    seed_demo_site("demo", racks, gpus_per_node=2)
    GPU.objects.update(slowdown_c=87.0, shutdown_c=92.0)
    CoolingLoop.objects.filter(name="CDU-1").update(
        capacity_kw=300, rated_flow_lpm=600, liquid_class="W32"
    )
