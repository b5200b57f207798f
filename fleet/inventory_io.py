"""Import the inventory from a YAML or JSON file (format: docs/inventory.md).

Two passes. The first reads the file's shape (types, required and unknown keys, choices,
names repeated within their scope) without touching the database. The second writes
every entry inside one transaction, running each model's `full_clean()`, and rolls the
whole transaction back if any entry failed, so a file imports completely or not at all.
Each problem names its entry by path, e.g. `sites[0].halls[1].racks[3] (A12): …`.
"""

from __future__ import annotations

import json
import zoneinfo
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import yaml
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import DatabaseError, models, transaction

from fleet.choices import (
    LiquidClassChoices,
    MeterRoleChoices,
    PowerFeedPhaseChoices,
    PowerFeedTypeChoices,
    RackCoolingChoices,
)
from fleet.models import (
    GPU,
    CoolingLoop,
    FacilityMeter,
    Hall,
    Node,
    PowerFeed,
    Rack,
    Site,
    pue_category_for_roles,
)

__all__ = (
    "ImportReport",
    "InventoryError",
    "import_inventory",
    "import_inventory_file",
    "load_inventory_file",
    "read_inventory",
)

FORMAT_VERSION = 1
MAX_GPUS_PER_NODE = 1024

M = TypeVar("M", bound=models.Model)


class InventoryError(Exception):
    """The file cannot be imported; `problems` lists every reason, each naming its entry."""

    def __init__(self, problems: Iterable[str]) -> None:
        # A rule broken by several GPUs of one node reads once.
        self.problems = list(dict.fromkeys(problems))
        super().__init__("\n".join(self.problems))


# Shape ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """One scalar key: its kind ("str", "number" or "int") and what else it must satisfy."""

    kind: str
    required: bool = False
    nullable: bool = False
    choices: tuple[str, ...] = ()
    check: Callable[[object], str | None] | None = None


@dataclass(frozen=True)
class Schema:
    noun: str
    fields: Mapping[str, Spec]
    lists: Mapping[str, Schema] = field(default_factory=dict)
    # A nested mapping that is not a list (a node's `gpus`).
    maps: Mapping[str, Schema] = field(default_factory=dict)


@dataclass(frozen=True)
class Item:
    """One entry of the file, its scalars checked; `where` is its path plus its name."""

    path: str
    where: str
    values: dict[str, object]
    children: dict[str, list[Item]]

    @property
    def name(self) -> str:
        return str(self.values.get("slug") or self.values.get("name") or "")

    def under(self, key: str) -> list[Item]:
        return self.children.get(key, [])


def _timezone_problem(value: object) -> str | None:
    try:
        zoneinfo.ZoneInfo(str(value))
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return f"unknown time zone {value!r}"
    return None


def _gpu_count_problem(value: object) -> str | None:
    if isinstance(value, int) and 0 <= value <= MAX_GPUS_PER_NODE:
        return None
    return f"must be 0–{MAX_GPUS_PER_NODE}"


def _choices(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(str(v) for v in values)


GPUS = Schema(
    "gpus",
    {
        "count": Spec("int", required=True, check=_gpu_count_problem),
        "model": Spec("str"),
        "slowdown_c": Spec("number", nullable=True),
        "shutdown_c": Spec("number", nullable=True),
        "power_limit_max_w": Spec("number", nullable=True),
    },
)
NODE = Schema(
    "node",
    {"name": Spec("str", required=True), "position": Spec("int"), "model": Spec("str")},
    maps={"gpus": GPUS},
)
FEED = Schema(
    "feed",
    {
        "name": Spec("str", required=True),
        "type": Spec("str", choices=_choices(PowerFeedTypeChoices.values)),
        "phase": Spec("str", choices=_choices(PowerFeedPhaseChoices.values)),
        "voltage": Spec("int"),
        "amperage": Spec("int"),
        "max_utilization": Spec("int"),
    },
)
RACK = Schema(
    "rack",
    {
        "name": Spec("str", required=True),
        "cooling": Spec("str", choices=_choices(RackCoolingChoices.values)),
        "power_budget_kw": Spec("number", required=True),
        "loop": Spec("str", nullable=True),
        "position": Spec("int"),
    },
    lists={"feeds": FEED, "nodes": NODE},
)
HALL = Schema("hall", {"name": Spec("str", required=True)}, lists={"racks": RACK})
LOOP = Schema(
    "loop",
    {
        "name": Spec("str", required=True),
        "capacity_kw": Spec("number", required=True),
        "liquid_class": Spec("str", choices=("", *_choices(LiquidClassChoices.values))),
        "supply_limit_c": Spec("number", nullable=True),
        "rated_flow_lpm": Spec("number", nullable=True),
    },
)
METER = Schema(
    "meter",
    {
        "name": Spec("str", required=True),
        "role": Spec("str", required=True, choices=_choices(MeterRoleChoices.values)),
    },
)
SITE = Schema(
    "site",
    {
        "slug": Spec("str", required=True),
        "name": Spec("str", required=True),
        "timezone": Spec("str", check=_timezone_problem),
    },
    lists={"loops": LOOP, "meters": METER, "halls": HALL},
)


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _scalar_problem(value: object, spec: Spec) -> str | None:
    if value is None:
        return None if spec.nullable else "must not be null"
    # YAML reads `yes` and `true` as booleans; they are never a number here.
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if spec.kind == "str" and not isinstance(value, str):
        return f"expected text, got {_type_name(value)} {value!r}"
    if spec.kind == "number" and not number:
        return f"expected a number, got {_type_name(value)} {value!r}"
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if spec.kind == "int" and not (number and whole):
        return f"expected a whole number, got {_type_name(value)} {value!r}"
    if spec.choices and value not in spec.choices:
        return f"{value!r} is not one of {', '.join(repr(c) for c in spec.choices)}"
    return spec.check(value) if spec.check else None


def _normalised(value: object, spec: Spec) -> object:
    """A checked value as its field stores it: `130` for a number field reads back 130.0."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value) if spec.kind == "number" else int(value)
    return value


def _read_values(
    raw: Mapping[str, object], schema: Schema, where: str
) -> tuple[dict[str, object], list[str]]:
    values: dict[str, object] = {}
    problems: list[str] = []
    for key, spec in schema.fields.items():
        if key not in raw:
            if spec.required:
                problems.append(f"{where}: {key}: required")
            continue
        problem = _scalar_problem(raw[key], spec)
        if problem:
            problems.append(f"{where}: {key}: {problem}")
        else:
            values[key] = _normalised(raw[key], spec)
    return values, problems


def _read_item(raw: object, schema: Schema, path: str, problems: list[str]) -> Item | None:
    if not isinstance(raw, dict):
        problems.append(f"{path}: expected a {schema.noun} (a mapping), got {_type_name(raw)}")
        return None
    label = raw.get("slug") if schema is SITE else raw.get("name")
    where = f"{path} ({label})" if isinstance(label, str) and label else path
    known = {*schema.fields, *schema.lists, *schema.maps}
    problems.extend(f"{where}: unknown key {k!r}" for k in raw if k not in known)
    values, value_problems = _read_values(raw, schema, where)
    problems.extend(value_problems)
    children: dict[str, list[Item]] = {}
    for key, sub in schema.lists.items():
        entries = raw.get(key, [])
        if not isinstance(entries, list):
            problems.append(f"{where}: {key}: expected a list, got {_type_name(entries)}")
            continue
        read = (_read_item(e, sub, f"{path}.{key}[{i}]", problems) for i, e in enumerate(entries))
        children[key] = [item for item in read if item is not None]
    for key, sub in schema.maps.items():
        if key in raw:
            item = _read_item(raw[key], sub, f"{path}.{key}", problems)
            children[key] = [item] if item else []
    return Item(path, where, values, children)


def _repeats(items: Iterable[Item], key: str, noun: str, scope: str) -> list[str]:
    """Entries whose `key` repeats an earlier one's within a scope the database makes unique."""
    first: dict[object, Item] = {}
    problems = []
    for item in items:
        value = item.values.get(key)
        if value is None:
            continue
        if value in first:
            problems.append(
                f"{item.where}: {key}: {noun} {value!r} appears twice in {scope} "
                f"(also at {first[value].path})"
            )
        else:
            first[value] = item
    return problems


def _repeated_names(sites: list[Item]) -> list[str]:
    problems = _repeats(sites, "slug", "site", "the file")
    nodes: list[Item] = []
    for site in sites:
        scope = f"site {site.name}"
        racks = [rack for hall in site.under("halls") for rack in hall.under("racks")]
        problems += _repeats(site.under("loops"), "name", "loop", scope)
        problems += _repeats(site.under("meters"), "name", "meter", scope)
        problems += _repeats(site.under("halls"), "name", "hall", scope)
        problems += _repeats(racks, "name", "rack", scope)
        for rack in racks:
            problems += _repeats(rack.under("feeds"), "name", "feed", f"rack {rack.name}")
            nodes += rack.under("nodes")
    # Node names are host names: unique across every site.
    return problems + _repeats(nodes, "name", "node", "the file")


def read_inventory(data: object) -> list[Item]:
    """The file's sites, checked for shape; raises InventoryError listing every problem."""
    if not isinstance(data, dict):
        raise InventoryError([f"the file must hold a mapping with `sites`, not {_type_name(data)}"])
    problems = [f"unknown top-level key {k!r}" for k in data if k not in {"version", "sites"}]
    if data.get("version", FORMAT_VERSION) != FORMAT_VERSION:
        problems.append(f"version: this importer reads version {FORMAT_VERSION}")
    raw_sites = data.get("sites")
    if not isinstance(raw_sites, list):
        raise InventoryError([*problems, f"sites: required, a list (got {_type_name(raw_sites)})"])
    read = (_read_item(s, SITE, f"sites[{i}]", problems) for i, s in enumerate(raw_sites))
    sites = [site for site in read if site is not None]
    problems += _repeated_names(sites)
    if problems:
        raise InventoryError(problems)
    return sites


def load_inventory_file(path: Path) -> object:
    """The parsed content of a .yaml/.yml or .json file."""
    suffix = path.suffix.lower()
    if suffix not in {".yaml", ".yml", ".json"}:
        raise InventoryError([f"{path}: expected a .yaml, .yml or .json file"])
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InventoryError([f"{path}: {exc.strerror or exc}"]) from exc
    try:
        return json.loads(text) if suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise InventoryError([f"{path}: not valid {suffix[1:].upper()}: {exc}"]) from exc


# Writing ----------------------------------------------------------------------------------


@dataclass
class ImportReport:
    """What an import did, per kind of entry, and the PUE category each site's meters allow."""

    counts: dict[str, Counter[str]] = field(default_factory=dict)
    pue_categories: dict[str, int | None] = field(default_factory=dict)

    def count(self, noun: str, outcome: str) -> None:
        self.counts.setdefault(noun, Counter())[outcome] += 1

    def changed(self) -> int:
        return sum(c["created"] + c["updated"] for c in self.counts.values())

    def lines(self) -> list[str]:
        lines = []
        for noun, c in self.counts.items():
            done = ", ".join(f"{c[o]} {o}" for o in ("created", "updated", "unchanged") if c[o])
            lines.append(f"{noun}s: {done}")
        for slug, category in self.pue_categories.items():
            pue = f"PUE category {category}" if category is not None else "no PUE (meters lack it)"
            lines.append(f"site {slug}: {pue}")
        return lines


def _validation_problems(where: str, exc: ValidationError) -> list[str]:
    if not hasattr(exc, "error_dict"):
        return [f"{where}: {m}" for m in exc.messages]
    return [
        f"{where}: {m}" if key == NON_FIELD_ERRORS else f"{where}: {key}: {m}"
        for key, messages in exc.message_dict.items()
        for m in messages
    ]


class _Writer:
    """Writes the checked entries and collects every problem the models find."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.report = ImportReport()

    def _valid(self, obj: models.Model, where: str, *, fields_only: bool = False) -> bool:
        try:
            obj.clean_fields() if fields_only else obj.full_clean()
        except ValidationError as exc:
            self.problems += _validation_problems(where, exc)
            return False
        return True

    def _upsert(
        self, obj: M, values: Mapping[str, object], item: Item, noun: str, *, defer: bool = False
    ) -> M | None:
        """Apply the file's values (keys it leaves out keep their value) and save if changed.

        `defer` checks only the fields now and leaves `full_clean()` to the caller, for a
        rack whose budget can only be judged once its feeds are written.
        """
        created = obj.pk is None
        # Compare by attname (`hall_id`, not `hall`) so no related row is fetched.
        attnames = [getattr(obj._meta.get_field(k), "attname", k) for k in values]
        before = [getattr(obj, a) for a in attnames]
        for key, value in values.items():
            setattr(obj, key, value)
        if not self._valid(obj, item.where, fields_only=defer):
            return None
        changed = created or before != [getattr(obj, a) for a in attnames]
        if changed:
            try:
                # A savepoint, so a refused row leaves the transaction usable for the rest.
                with transaction.atomic():
                    obj.save()
            except DatabaseError as exc:
                self.problems.append(f"{item.where}: {exc}")
                return None
        self.report.count(noun, "created" if created else "updated" if changed else "unchanged")
        return obj

    def _named(self, model: type[M], item: Item, noun: str, **scope: object) -> M | None:
        """Update or create the entry named `item.name` within `scope` (its parent)."""
        existing = model._default_manager.filter(name=item.name, **scope).first()
        return self._upsert(existing or model(**scope), item.values, item, noun)

    def site(self, item: Item) -> None:
        existing = Site.objects.filter(slug=item.name).first()
        site = self._upsert(existing or Site(), item.values, item, "site")
        if site is None:
            return
        for loop in item.under("loops"):
            self._named(CoolingLoop, loop, "loop", site=site)
        for meter in item.under("meters"):
            self._named(FacilityMeter, meter, "meter", site=site)
        for hall_item in item.under("halls"):
            hall = self._named(Hall, hall_item, "hall", site=site)
            for rack in hall_item.under("racks"):
                if hall is not None:
                    self.rack(rack, hall, site)
        roles = set(FacilityMeter.objects.filter(site=site).values_list("role", flat=True))
        self.report.pue_categories[site.slug] = pue_category_for_roles(roles)

    def _loop_known(self, site: Site, values: dict[str, object], item: Item) -> bool:
        """Replace the loop's name with the loop; False (and a problem) if the site lacks it."""
        name = values.get("loop")
        if name is None:
            return True
        values["loop"] = CoolingLoop.objects.filter(site=site, name=name).first()
        if values["loop"] is None:
            self.problems.append(
                f"{item.where}: loop: no cooling loop {name!r} in site {site.slug}"
            )
            return False
        return True

    def rack(self, item: Item, hall: Hall, site: Site) -> None:
        values: dict[str, object] = {**item.values, "hall": hall}
        if not self._loop_known(site, values, item):
            return
        # Racks are named uniquely within a site, so a rack listed under another hall moves.
        existing = Rack.objects.filter(hall__site=site, name=item.name).first()
        rack = self._upsert(existing or Rack(), values, item, "rack", defer=True)
        if rack is None:
            return
        for feed in item.under("feeds"):
            self._named(PowerFeed, feed, "feed", rack=rack)
        # Now that its feeds are written, the rack's budget can be held against them.
        self._valid(rack, item.where)
        for node in item.under("nodes"):
            self.node(node, rack)

    def node(self, item: Item, rack: Rack) -> None:
        existing = Node.objects.filter(name=item.name).first()
        node = self._upsert(existing or Node(), {**item.values, "rack": rack}, item, "node")
        if node is None:
            return
        for gpus in item.under("gpus"):
            values = {k: v for k, v in gpus.values.items() if k != "count"}
            count = gpus.values["count"]
            # One query for the node's GPUs rather than one per index.
            stored = {gpu.index: gpu for gpu in node.gpus.all()}
            for index in range(count if isinstance(count, int) else 0):
                gpu = stored.get(index) or GPU(node=node, index=index)
                self._upsert(gpu, values, gpus, "GPU")


def import_inventory(data: object, *, dry_run: bool = False) -> ImportReport:
    """Create or update everything the data names; all or nothing. Never deletes."""
    sites = read_inventory(data)
    with transaction.atomic():
        writer = _Writer()
        for site in sites:
            writer.site(site)
        if writer.problems:
            # Raising out of the atomic block rolls back whatever was already written.
            raise InventoryError(writer.problems)
        if dry_run:
            transaction.set_rollback(True)
    return writer.report


def import_inventory_file(path: Path, *, dry_run: bool = False) -> ImportReport:
    return import_inventory(load_inventory_file(path), dry_run=dry_run)
