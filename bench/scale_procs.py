"""Processes for bench/scale.py: nginx in front of the server processes, and what each
process spent (CPU from /proc/<pid>/stat, resident memory from /proc/<pid>/status)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from tests.support.processes import stop_process

NGINX = "/usr/sbin/nginx"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

MINIMAL_CONF = """
worker_processes auto;
worker_rlimit_nofile 20000;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/nginx-body;
    proxy_temp_path {tmp}/nginx-proxy;
    fastcgi_temp_path {tmp}/nginx-fastcgi;
    uwsgi_temp_path {tmp}/nginx-uwsgi;
    scgi_temp_path {tmp}/nginx-scgi;
    upstream fleetwatch {{ {servers} }}
    server {{
        listen 127.0.0.1:{port};
        client_header_timeout 10s;  client_body_timeout 10s;  send_timeout 30s;
        keepalive_timeout 30s;  client_max_body_size 1100k;
        proxy_set_header Host $host;
        proxy_set_header X-Forwarded-For $remote_addr;
        proxy_set_header X-Forwarded-Proto $scheme;
        location / {{ proxy_pass http://fleetwatch; }}
        location /ws/ {{
            proxy_pass http://fleetwatch;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;  proxy_set_header Connection "upgrade";
            proxy_read_timeout 120s;  proxy_send_timeout 120s;
        }}
    }}
}}
"""


def shipped_conf(tmp: Path, port: int, upstreams: list[int]) -> str | None:
    """docs/examples/nginx.conf as tests/support/nginx.py runs it (ports, certificate and
    log paths substituted, nothing else), inside a main config sized for thousands of
    sockets (each agent holds one to nginx and nginx one to a server process)."""
    try:
        from tests.support.nginx import site_config
    except ImportError:
        return None
    from tests.support.server import free_port

    site = tmp / "fleetwatch-site.conf"
    site.write_text(site_config(port, free_port(), upstreams, tmp))
    temps = "".join(
        f"    {k}_temp_path {tmp}/nginx-{k};\n"
        for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    user = "user root;\n" if os.geteuid() == 0 else ""  # workers write the temp paths
    return (
        f"{user}worker_processes auto;\nworker_rlimit_nofile 20000;\n"
        f"error_log {tmp}/nginx-error.log warn;\nevents {{ worker_connections 8192; }}\n"
        f"http {{\n{temps}    access_log off;\n    include {site};\n}}\n"
    )


@contextlib.contextmanager
def nginx(tmp: Path, upstreams: list[int]) -> Iterator[tuple[int, str, int]]:
    """nginx on a free loopback port proxying to `upstreams`; yields (port, which conf, pid)."""
    from tests.support.server import free_port

    port = free_port()
    conf, which = shipped_conf(tmp, port, upstreams), "docs/examples/nginx.conf"
    if conf is None:
        servers = " ".join(f"server 127.0.0.1:{p};" for p in upstreams)
        conf, which = MINIMAL_CONF.format(tmp=tmp, servers=servers, port=port), "minimal"
    path = tmp / "nginx.conf"
    path.write_text(conf)
    args = [NGINX, "-p", str(tmp), "-c", str(path), "-g", f"daemon off; pid {tmp}/nginx.pid;"]
    check = subprocess.run([*args, "-t"], capture_output=True, text=True)
    if check.returncode:
        raise RuntimeError(f"nginx -t ({which}):\n{check.stderr}\n{conf}")
    log = (tmp / "nginx.out").open("ab")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while not _answers(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nginx did not start: {(tmp / 'nginx-error.log').read_text()}")
            time.sleep(0.05)
        yield port, which, proc.pid
    finally:
        stop_process(proc, 10)


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # fields 14 and 15 of stat


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def children(parents: Iterable[int]) -> list[int]:
    """Direct children of `parents` (the ingest child of each server process)."""
    wanted, found = set(parents), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid in wanted:
            found.append(int(entry.name))
    return found


def with_children(pids: Iterable[int]) -> list[int]:
    roots = list(pids)
    return roots + children(roots)


def cpu_of(pids: Iterable[int]) -> dict[int, float]:
    return {pid: cpu_seconds(pid) for pid in pids}


def cpu_spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU between two readings; a process first seen in `after` counts from zero."""
    return sum(after[pid] - before.get(pid, 0.0) for pid in after)


def machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (all cores; /proc/stat, not idle or
    iowait): the difference over the window shows what other work took beside ours."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / CLOCK_TICKS


def thread_cpu_seconds(pid: int) -> tuple[float, float]:
    """(main thread, every other thread) CPU of one process: for a server process, its
    event loop against the threads beside it (sync database calls, the live publisher)."""
    main = other = 0.0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0.0, 0.0
    for task in tasks:
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        spent = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        if task.name == str(pid):
            main += spent
        else:
            other += spent
    return main, other
