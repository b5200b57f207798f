"""`import_inventory`: a YAML or JSON file becomes the inventory, all or nothing."""

from __future__ import annotations

import copy
import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command, execute_from_command_line
from django.core.management.base import CommandError
from django.db import connections

from fleet.inventory_io import InventoryError, import_inventory, import_inventory_file
from fleet.models import GPU, CoolingLoop, FacilityMeter, Hall, Node, PowerFeed, Rack, Site

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "inventory.yaml"
INVENTORY_MODELS = (Site, Hall, CoolingLoop, FacilityMeter, Rack, PowerFeed, Node, GPU)

pytestmark = pytest.mark.django_db


def example() -> dict[str, Any]:
    data = yaml.safe_load(EXAMPLE.read_text())
    assert isinstance(data, dict)
    return data


def rack_entry(data: dict[str, Any], hall: int, rack: int) -> dict[str, Any]:
    entry = data["sites"][0]["halls"][hall]["racks"][rack]
    assert isinstance(entry, dict)
    return entry


def write(tmp_path: Path, data: object, suffix: str) -> Path:
    path = tmp_path / f"inventory{suffix}"
    text = json.dumps(data) if suffix == ".json" else yaml.safe_dump(data, sort_keys=False)
    path.write_text(text)
    return path


def snapshot() -> dict[str, list[tuple[Any, ...]]]:
    """Every stored row of the inventory, to show that a refused import left it alone."""
    return {m.__name__: list(m.objects.order_by("pk").values_list()) for m in INVENTORY_MODELS}


def problems_of(data: object) -> list[str]:
    with pytest.raises(InventoryError) as caught:
        import_inventory(data)
    return caught.value.problems


# A clean import ---------------------------------------------------------------------------


def test_the_documented_example_imports_cleanly() -> None:
    out = StringIO()
    call_command("import_inventory", str(EXAMPLE), stdout=out)
    a01 = Rack.objects.get(name="A01")
    assert a01.power_budget_kw == 130
    assert a01.loop is not None and a01.loop.name == "CDU-1"
    assert a01.feed_capacity_kw() == pytest.approx(143.8, abs=0.05)
    assert Node.objects.get(name="gpu-a02-01").gpus.count() == 8
    assert GPU.objects.get(node__name="gpu-a02-01", index=7).slowdown_c == 87
    assert GPU.objects.get(node__name="gpu-b01-02", index=3).model == "NVIDIA L40S"
    assert Rack.objects.get(name="B01").hall.name == "Hall B"
    assert "PUE category 3" in out.getvalue()


def test_keys_left_out_take_the_models_defaults() -> None:
    import_inventory_file(EXAMPLE)
    feed = PowerFeed.objects.get(rack__name="A02", name="A")
    assert (feed.type, feed.phase, feed.voltage, feed.max_utilization) == (
        "primary",
        "three",
        415,
        80,
    )


@pytest.mark.parametrize("suffix", [".json", ".yml"])
def test_json_and_yml_files_import_exactly_what_the_yaml_does(tmp_path: Path, suffix: str) -> None:
    import_inventory_file(write(tmp_path, example(), suffix))
    # The YAML original then finds every entry already as it describes it.
    report = import_inventory_file(EXAMPLE)
    assert report.changed() == 0
    assert report.counts["GPU"]["unchanged"] == 40


# Idempotence ------------------------------------------------------------------------------


def test_reimporting_the_same_file_changes_nothing() -> None:
    import_inventory_file(EXAMPLE)
    before = snapshot()
    report = import_inventory_file(EXAMPLE)
    assert report.changed() == 0
    assert snapshot() == before


def test_reimporting_an_edited_file_updates_entries_in_place(tmp_path: Path) -> None:
    import_inventory_file(EXAMPLE)
    a01_pk = Rack.objects.get(name="A01").pk
    data = example()
    rack_entry(data, 0, 0)["power_budget_kw"] = 120
    rack_entry(data, 1, 0)["nodes"].append(
        {"name": "gpu-b01-03", "position": 5, "gpus": {"count": 2, "model": "NVIDIA L40S"}}
    )
    report = import_inventory_file(write(tmp_path, data, ".yaml"))
    a01 = Rack.objects.get(name="A01")
    assert (a01.pk, a01.power_budget_kw) == (a01_pk, 120)
    assert Node.objects.get(name="gpu-b01-03").gpus.count() == 2
    assert report.counts["rack"]["updated"] == 1
    assert report.counts["node"]["created"] == 1


def test_rack_listed_under_another_hall_moves_there(tmp_path: Path) -> None:
    import_inventory_file(EXAMPLE)
    data = example()
    halls = data["sites"][0]["halls"]
    halls[1]["racks"].append(halls[0]["racks"].pop(2))  # A03 to Hall B
    import_inventory_file(write(tmp_path, data, ".yaml"))
    assert Rack.objects.filter(name="A03").count() == 1
    assert Rack.objects.get(name="A03").hall.name == "Hall B"


# All or nothing ---------------------------------------------------------------------------


def test_import_with_one_bad_rack_changes_nothing_and_names_it(tmp_path: Path) -> None:
    import_inventory_file(EXAMPLE)
    before = snapshot()
    data = example()
    rack_entry(data, 0, 0)["power_budget_kw"] = 120  # a valid edit, ahead of the bad one
    data["sites"][0]["loops"].append({"name": "CDU-3", "capacity_kw": 50})
    rack_entry(data, 1, 0)["power_budget_kw"] = 200  # B01's feeds give 11.8 kW
    with pytest.raises(InventoryError) as caught:
        import_inventory_file(write(tmp_path, data, ".yaml"))
    assert caught.value.problems == [
        "sites[0].halls[1].racks[0] (B01): power_budget_kw: "
        "budget 200 kW exceeds its primary feeds' 11.8 kW"
    ]
    assert snapshot() == before


def test_refused_first_import_leaves_the_database_empty() -> None:
    data = example()
    # The last node of the last rack: everything before it has been written by then.
    rack_entry(data, 1, 0)["nodes"][1]["gpus"] |= {"slowdown_c": 95, "shutdown_c": 90}
    assert problems_of(data) == [
        "sites[0].halls[1].racks[0].nodes[1].gpus: slowdown_c: slowdown must not exceed shutdown"
    ]
    assert all(not rows for rows in snapshot().values())


def test_every_problem_in_the_file_is_reported_at_once() -> None:
    data = example()
    rack_entry(data, 0, 0)["loop"] = None  # direct-liquid rack left without its loop
    rack_entry(data, 1, 0)["feeds"][0]["max_utilization"] = 120
    problems = problems_of(data)
    assert (
        "sites[0].halls[0].racks[0] (A01): loop: "
        "a Direct liquid (cold plate) rack needs the loop that cools it"
    ) in problems
    assert any(
        p.startswith("sites[0].halls[1].racks[0].feeds[0] (A): max_utilization:") for p in problems
    )


def test_gpus_whose_slowdown_exceeds_shutdown_are_refused_by_their_node_path() -> None:
    data = example()
    rack_entry(data, 0, 1)["nodes"][0]["gpus"]["slowdown_c"] = 95
    assert problems_of(data) == [
        "sites[0].halls[0].racks[1].nodes[0].gpus: slowdown_c: slowdown must not exceed shutdown"
    ]
    assert not Site.objects.exists()


def test_rack_naming_a_loop_the_site_lacks_is_refused_naming_the_loop() -> None:
    data = example()
    rack_entry(data, 0, 1)["loop"] = "CDU-9"
    assert problems_of(data) == [
        "sites[0].halls[0].racks[1] (A02): loop: no cooling loop 'CDU-9' in site ams1"
    ]


def test_rack_may_name_a_loop_already_in_the_database(tmp_path: Path) -> None:
    import_inventory_file(EXAMPLE)
    data = example()
    del data["sites"][0]["loops"]
    import_inventory_file(write(tmp_path, data, ".json"))
    assert Rack.objects.get(name="A02").loop == CoolingLoop.objects.get(name="CDU-2")


# The file's shape -------------------------------------------------------------------------


def test_misspelt_key_is_refused_rather_than_ignored() -> None:
    data = example()
    entry = rack_entry(data, 1, 0)
    entry["power_budget"] = entry.pop("power_budget_kw")
    assert problems_of(data) == [
        "sites[0].halls[1].racks[0] (B01): unknown key 'power_budget'",
        "sites[0].halls[1].racks[0] (B01): power_budget_kw: required",
    ]


def test_value_of_the_wrong_type_is_refused_naming_key_and_value() -> None:
    data = example()
    rack_entry(data, 0, 2)["feeds"][1]["amperage"] = "63A"
    rack_entry(data, 0, 2)["power_budget_kw"] = True
    assert problems_of(data) == [
        "sites[0].halls[0].racks[2] (A03): power_budget_kw: expected a number, got bool True",
        "sites[0].halls[0].racks[2].feeds[1] (B): amperage: expected a whole number, got str '63A'",
    ]


def test_unknown_choice_is_refused_listing_the_allowed_ones() -> None:
    data = example()
    rack_entry(data, 1, 0)["cooling"] = "water"
    (problem,) = problems_of(data)
    assert problem.startswith("sites[0].halls[1].racks[0] (B01): cooling: 'water' is not one of")
    assert "'direct_liquid'" in problem


def test_gpu_count_beyond_what_a_node_can_hold_is_refused() -> None:
    data = example()
    rack_entry(data, 1, 0)["nodes"][1]["gpus"]["count"] = 2000
    assert problems_of(data) == ["sites[0].halls[1].racks[0].nodes[1].gpus: count: must be 0–1024"]


def test_unknown_time_zone_is_refused() -> None:
    data = example()
    data["sites"][0]["timezone"] = "Mars/Olympus"
    assert problems_of(data) == ["sites[0] (ams1): timezone: unknown time zone 'Mars/Olympus'"]


def test_same_rack_name_in_two_halls_of_a_site_is_refused_naming_both() -> None:
    data = example()
    rack_entry(data, 1, 0)["name"] = "A01"
    (problem,) = [p for p in problems_of(data) if "appears twice" in p]
    assert problem == (
        "sites[0].halls[1].racks[0] (A01): name: rack 'A01' appears twice in site ams1 "
        "(also at sites[0].halls[0].racks[0])"
    )


def test_same_node_name_in_two_racks_is_refused() -> None:
    data = example()
    rack_entry(data, 1, 0)["nodes"][0]["name"] = "gpu-a01-01"
    assert problems_of(data) == [
        "sites[0].halls[1].racks[0].nodes[0] (gpu-a01-01): name: node 'gpu-a01-01' appears "
        "twice in the file (also at sites[0].halls[0].racks[0].nodes[0])"
    ]


def test_file_without_sites_is_refused() -> None:
    assert problems_of({"version": 1, "site": []}) == [
        "unknown top-level key 'site'",
        "sites: required, a list (got null)",
    ]


# Files and the command --------------------------------------------------------------------


def test_file_of_another_kind_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "inventory.csv"
    path.write_text("site,hall\n")
    with pytest.raises(InventoryError, match=r"expected a \.yaml, \.yml or \.json file"):
        import_inventory_file(path)


def test_broken_yaml_is_refused_with_its_position(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text("sites:\n  - slug: ams1\n   name: [unclosed\n")
    with pytest.raises(InventoryError, match=r"(?s)not valid YAML: .*line 3, column 4"):
        import_inventory_file(path)


def test_dry_run_checks_everything_and_writes_nothing() -> None:
    out = StringIO()
    call_command("import_inventory", str(EXAMPLE), "--dry-run", stdout=out)
    assert "dry run" in out.getvalue()
    assert "racks: 4 created" in out.getvalue()
    assert not Site.objects.exists()


def test_command_reports_problems_as_a_command_error(tmp_path: Path) -> None:
    data = example()
    rack_entry(data, 0, 1)["loop"] = "CDU-9"
    path = write(tmp_path, data, ".yaml")
    with pytest.raises(CommandError, match=r"nothing imported, 1 problem:\n.*racks\[1\] \(A02\)"):
        call_command("import_inventory", str(path))


def test_command_line_exits_non_zero_with_the_problem_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = copy.deepcopy(example())
    rack_entry(data, 0, 1)["loop"] = "CDU-9"
    path = write(tmp_path, data, ".json")
    # run_from_argv closes every connection when done, the test's own included.
    monkeypatch.setattr(connections, "close_all", lambda: None)
    with pytest.raises(SystemExit) as exited:
        execute_from_command_line(["manage.py", "import_inventory", str(path)])
    assert exited.value.code == 1
    captured = capsys.readouterr()
    assert "no cooling loop 'CDU-9' in site ams1" in captured.err
    assert captured.out == ""
    assert not Site.objects.exists()
