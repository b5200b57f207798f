"""Take the screenshots of docs/ui.md: the demo (`python -m fleetwatch.demo`, as `make
demo` runs it) in a temporary folder, with a CDU pump failure on CDU-1, and Debian's
chromium visiting every page as the demo's admin.

    .venv/bin/python docs/tour.py [--out docs/img] [--fault-after 20] [--wait 90]

Each screenshot is checked not to be blank. Takes about two minutes.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"the demo did not answer at {url} in {timeout_s:.0f} s")


def shoot(page, path: Path) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_timeout(1500)  # a push or two
    page.screenshot(path=str(path), full_page=False)
    if len(set(path.read_bytes()[200:20000])) < 64:
        raise SystemExit(f"{path} looks blank")
    print("saved", path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


def tour(base: str, password: str, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.goto(base + "/admin/login/?next=/")
        page.fill("input[name=username]", "admin")
        page.fill("input[name=password]", password)
        page.click("[type=submit]")
        page.wait_for_url(base + "/")
        shoot(page, out / "fleet.png")
        page.goto(base + "/?mode=throttling")
        shoot(page, out / "fleet-throttling.png")
        page.goto(base + "/racks/1/")
        shoot(page, out / "rack.png")
        node = page.locator("a.node-name").first.get_attribute("href")
        page.goto(base + str(node))
        shoot(page, out / "node.png")
        gpu = page.locator("a[href^='/gpus/']").first.get_attribute("href")
        page.goto(base + str(gpu))
        page.wait_for_selector(".js-plotly-plot", timeout=15000)
        shoot(page, out / "gpu.png")
        for name in ("cooling", "power", "alerts"):
            page.goto(f"{base}/{name}/")
            shoot(page, out / f"{name}.png")
        browser.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--fault-after", type=int, default=20, help="s until CDU-1's pumps fail")
    parser.add_argument("--wait", type=int, default=90, help="s of demo before the tour")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fw-tour-") as var:
        port = free_port()
        env = dict(os.environ)
        env.update(
            FLEETWATCH_VAR_DIR=var,
            FLEETWATCH_PORT=str(port),
            FLEETWATCH_DEMO_FAULTS=f"cdu-pump-fail:CDU-1@{args.fault_after}s+10m",
        )
        demo = subprocess.Popen(
            [sys.executable, "-m", "fleetwatch.demo"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            wait_for(base + "/api/v1/inventory", 120)
            print(f"demo up at {base}; waiting {args.wait} s for data and the fault")
            time.sleep(args.wait)
            password = (Path(var) / "demo" / "admin-password").read_text().strip()
            tour(base, password, args.out)
        finally:
            os.killpg(demo.pid, signal.SIGINT)
            try:
                demo.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(demo.pid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
