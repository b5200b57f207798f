"""Which `feeds` entities a site's inventory lacks, and what the message offers instead."""

from __future__ import annotations

import pytest

from agents.facility.config import parse_entity
from agents.facility.inventory_check import (
    InventoryUnavailable,
    SiteEntities,
    entity_problem,
    parse_site_entities,
)

SITE = SiteEntities("demo", {"A12": ("A", "B"), "A13": ("A",)}, ("CDU-1", "CDU-2"))


@pytest.mark.parametrize("entity", ["rack:A12", "feed:A12/B", "loop:CDU-2", "meter:utility"])
def test_an_entity_the_site_has_is_no_problem(entity: str) -> None:
    assert entity_problem(parse_entity(entity), SITE) is None


def test_a_mistyped_feed_lists_the_racks_own_feeds() -> None:
    problem = entity_problem(parse_entity("feed:A12/C"), SITE)

    assert problem == "rack A12 has no feed 'C'; its feeds: A, B"


def test_a_mistyped_rack_suggests_the_closest_names() -> None:
    problem = entity_problem(parse_entity("feed:A21/A"), SITE)

    assert problem is not None
    assert problem.startswith("site demo has no rack 'A21'; did you mean ")
    assert "A12" in problem.split("?")[0]
    assert problem.endswith("its racks: A12, A13")


def test_a_mistyped_loop_lists_the_sites_loops() -> None:
    problem = entity_problem(parse_entity("loop:CDU-3"), SITE)

    assert problem is not None and problem.endswith("its loops: CDU-1, CDU-2")


def test_a_big_site_lists_only_some_names_and_says_how_many() -> None:
    site = SiteEntities("big", {f"R{i:03}": ("A",) for i in range(40)}, ())

    problem = entity_problem(parse_entity("rack:Q"), site)

    assert problem is not None and problem.endswith("R011, … (40 in all)")


def test_a_site_without_loops_says_so() -> None:
    problem = entity_problem(parse_entity("loop:CDU-1"), SiteEntities("demo", {}, ()))

    assert problem == "site demo has no loop 'CDU-1'; its loops: none"


def test_an_inventory_of_the_wrong_shape_is_unavailable_not_empty() -> None:
    with pytest.raises(InventoryUnavailable):
        parse_site_entities({"racks": [{"feeds": []}]})
