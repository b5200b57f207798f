"""Where the server finds its pages and static files, and where it keeps its data by default:
in the checkout (`templates/`, `static/`, `var/` beside the packages), or, installed from its
wheel, inside the `fleetwatch` package (the wheel carries them there) with data under the
working directory's `var/` unless FLEETWATCH_VAR_DIR says otherwise (the systemd units in
docs/examples/ set it)."""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
CHECKOUT_DIR = PACKAGE_DIR.parent


def installed_from_wheel() -> bool:
    return (PACKAGE_DIR / "templates").is_dir()


def _resource_root() -> Path:
    return PACKAGE_DIR if installed_from_wheel() else CHECKOUT_DIR


TEMPLATES_DIR = _resource_root() / "templates"
STATIC_DIR = _resource_root() / "static"
DEFAULT_VAR_DIR = Path.cwd() / "var" if installed_from_wheel() else CHECKOUT_DIR / "var"
