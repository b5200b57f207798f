"""A real nginx (Debian's, /usr/sbin/nginx) in front of Fleetwatch server processes, run
from THE SHIPPED site config (docs/examples/nginx.conf) so the example cannot rot: only its
ports, certificate and log paths are substituted, each substitution checked to apply.

    with Nginx.started(tmp_path / "nginx", upstreams=[a.port, b.port]) as proxy:
        proxy.url, proxy.ws_url, proxy.redirect_url, proxy.upstreams_used()

Everything lives in its own directory (`nginx -p DIR -e DIR/error.log`): no root paths, no
daemon, its own pid file.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from tests.support.processes import stop_process
from tests.support.server import ROOT, free_port

SHIPPED = ROOT / "docs" / "examples" / "nginx.conf"
SHIPPED_PORTS = ("8001", "8002")  # the upstream's `server 127.0.0.1:…` lines, in order


def nginx_binary() -> str | None:
    return shutil.which("nginx") or (
        "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None
    )


def _substitute(text: str, pattern: str, replacement: str, count: int = 1) -> str:
    """re.sub that fails when the shipped file no longer has what the test relies on."""
    out, made = re.subn(pattern, replacement, text, flags=re.M)
    if made != count:
        raise AssertionError(f"{SHIPPED}: {pattern!r} matched {made} times, not {count}")
    return out


def site_config(port: int, redirect_port: int, upstreams: Sequence[int], log_dir: Path) -> str:
    """The shipped site config for a test: plain http on loopback ports (TLS needs a
    certificate; the redirect server still answers), these upstream ports, logs here."""
    text = SHIPPED.read_text()
    text = _substitute(text, r"^(\s*)listen 443 ssl http2;", rf"\1listen 127.0.0.1:{port};")
    text = _substitute(text, r"^\s*ssl_certificate(_key)? .*;\n", "", count=2)
    text = _substitute(text, r"^(\s*)listen 80;", rf"\1listen 127.0.0.1:{redirect_port};")
    text = _substitute(text, r"/var/log/nginx/", f"{log_dir}/", count=2)
    if len(upstreams) < len(SHIPPED_PORTS):
        raise ValueError(f"the shipped upstream has {len(SHIPPED_PORTS)} servers")
    for shipped, upstream in zip(SHIPPED_PORTS, upstreams, strict=False):
        text = _substitute(
            text, rf"server 127\.0\.0\.1:{shipped}\b", f"server 127.0.0.1:{upstream}"
        )
    extra = "".join(f"    server 127.0.0.1:{p};\n" for p in upstreams[len(SHIPPED_PORTS) :])
    return _substitute(text, r"^(\s*keepalive \d+;)", rf"{extra}\1")


def main_config(directory: Path, site: Path) -> str:
    """nginx.conf around the site: temp paths in the test's directory (not /var/lib/nginx),
    workers as the current user when run as root (they write those temp files)."""
    temp = directory / "temp"
    temps = "".join(
        f"    {kind}_temp_path {temp / kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    user = "user root;\n" if os.geteuid() == 0 else ""
    return (
        f"{user}worker_processes 1;\n"
        "events { worker_connections 512; }\n"
        "http {\n"
        f"{temps}"
        f"    access_log {directory / 'access.log'};\n"
        f"    include {site};\n"
        "}\n"
    )


class Nginx:
    def __init__(self, directory: Path, upstreams: Sequence[int]) -> None:
        self.directory = directory
        self.upstreams = list(upstreams)
        self.port = free_port()
        self.redirect_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def redirect_url(self) -> str:
        return f"http://127.0.0.1:{self.redirect_port}"

    @property
    def access_log(self) -> Path:
        return self.directory / "fleetwatch.access.log"  # the shipped file's name

    def write_config(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "temp").mkdir(exist_ok=True)
        site = self.directory / "fleetwatch.conf"
        site.write_text(site_config(self.port, self.redirect_port, self.upstreams, self.directory))
        main = self.directory / "nginx.conf"
        main.write_text(main_config(self.directory, site))
        return main

    def start(self) -> None:
        binary = nginx_binary()
        assert binary, "nginx is not installed"
        main = self.write_config()
        argv = [binary, "-p", str(self.directory), "-c", str(main)]
        argv += ["-e", str(self.directory / "error.log")]
        argv += ["-g", f"daemon off; pid {self.directory / 'nginx.pid'};"]
        test = subprocess.run([*argv, "-t"], capture_output=True, text=True, timeout=30)
        if test.returncode:
            raise RuntimeError(f"nginx -t refused the config:\n{test.stderr}")
        log = (self.directory / "stderr.log").open("ab")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nginx exited:\n{self.logs()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return
            time.sleep(0.05)
        raise RuntimeError(f"nginx did not listen in 10 s:\n{self.logs()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            stop_process(self.proc, 10)
        self.proc = None

    def upstreams_used(self, path_prefix: str) -> dict[int, int]:
        """Requests (WebSockets: closed connections) to paths under `path_prefix`, per
        upstream port, from the access log's `upstream=` field."""
        counts: dict[int, int] = {}
        text = self.access_log.read_text() if self.access_log.exists() else ""
        for line in text.splitlines():
            request = re.search(r'"[A-Z]+ (\S+) ', line)
            upstream = re.search(r"upstream=127\.0\.0\.1:(\d+)", line)
            if request and upstream and request[1].startswith(path_prefix):
                port = int(upstream[1])
                counts[port] = counts.get(port, 0) + 1
        return counts

    def logs(self, chars: int = 3000) -> str:
        parts = []
        for name in ("stderr.log", "error.log", "fleetwatch.error.log"):
            path = self.directory / name
            if path.exists():
                parts.append(f"--- nginx {name} ---\n{path.read_text()[-chars:]}")
        return "\n".join(parts)

    @classmethod
    @contextlib.contextmanager
    def started(cls, directory: Path, upstreams: Sequence[int]) -> Iterator[Nginx]:
        proxy = cls(directory, upstreams)
        try:
            proxy.start()
            yield proxy
        finally:
            proxy.stop()
