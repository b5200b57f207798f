"""The suite's own layout: a test module stands alone. What several modules share lives in
tests/support/ (helpers, and fixtures a module binds by name) or a conftest.py (fixtures
pytest finds, never imported), so that running, moving or deleting one test file never
changes another; and a test that lacks a program outside Python skips, or fails where the
run asks for it (tests/support/needs.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import needs

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def is_test_module(module: str) -> bool:
    """Whether a dotted name is one of the suite's test modules (tests/…/test_*.py) or a
    conftest.py: pytest loads those itself, and what they hold is not for importing."""
    parts = module.split(".")
    path = ROOT.joinpath(*parts).with_suffix(".py")
    named = parts[-1].startswith("test_") or parts[-1] == "conftest"
    return parts[0] == "tests" and named and path.is_file()


def imported_modules(tree: ast.Module, package: str) -> list[tuple[int, str]]:
    """(line, dotted name) of every module an import could load, `from m import x` giving
    both m and m.x (x may be a module)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importing module's package
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def imports_of_test_modules(path: Path) -> list[str]:
    package = ".".join(path.relative_to(ROOT).parent.parts)
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for line, module in imported_modules(tree, package)
        if is_test_module(module)
    ]


def test_no_module_of_the_suite_imports_a_test_module() -> None:
    offences = [
        found for path in sorted(TESTS.rglob("*.py")) for found in imports_of_test_modules(path)
    ]
    assert offences == [], "move what is shared to tests/support/ or a conftest.py:\n" + "\n".join(
        offences
    )


# Modules outside tests/support/ that are neither tests nor conftest.py, and why.
NOT_SHARED = {
    "tests/testenv.py": "a pytest plugin, loaded with -p before the settings are read",
    "tests/agents/plugin_example.py": "the collector plugin the agent's plugin test loads by name",
}


def test_shared_helpers_live_in_tests_support() -> None:
    elsewhere = [
        str(path.relative_to(ROOT))
        for path in sorted(TESTS.rglob("*.py"))
        if "support" not in path.relative_to(TESTS).parts[:1]
        and not path.name.startswith("test_")
        and path.name not in ("conftest.py", "__init__.py")
        and str(path.relative_to(ROOT)) not in NOT_SHARED
    ]
    assert elsewhere == [], "helpers belong in tests/support/: " + ", ".join(elsewhere)


def test_the_layout_check_sees_each_way_of_importing_a_test_module() -> None:
    source = (
        "from tests.fleet.test_rollups import T\n"
        "from tests.fleet import test_rollups\n"
        "import tests.fleet.test_rollups\n"
        "from .test_rollups import T\n"
        "from tests.support.databases import T\n"
        "from tests.facility.conftest import NOW\n"
    )
    found = [m for _, m in imported_modules(ast.parse(source), "tests.fleet") if is_test_module(m)]
    assert found == ["tests.fleet.test_rollups"] * 4 + ["tests.facility.conftest"]


def test_a_missing_dependency_skips_unless_the_run_requires_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(needs.PROMETHEUS, raising=False)
    with pytest.raises(pytest.skip.Exception, match="promtool is not installed"):
        needs.missing(needs.PROMETHEUS, "promtool is not installed")
    monkeypatch.setenv(needs.PROMETHEUS, "1")
    with pytest.raises(pytest.fail.Exception, match="REQUIRE_PROMETHEUS=1 but promtool"):
        needs.missing(needs.PROMETHEUS, "promtool is not installed")
