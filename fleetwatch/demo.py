"""`make demo`: the whole product on the embedded default, one command.

Migrates, seeds the demo site (safe to run twice), then runs the web server,
three Celery workers (the alert pipeline; the Prometheus pull; maintenance), exactly one
beat and the fleet
simulator, prints where to look, and stops them all on Ctrl-C. Everything lives under `var/`.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from fleetwatch.celery import DEFAULT, MAINTENANCE, NOTIFICATIONS, PULL, RULES

# The queues by job (fleetwatch/celery.py) as the demo splits them between its workers.
ALERT_WORKER_QUEUES = (RULES, NOTIFICATIONS, DEFAULT)

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _secret_file(path: Path, prefix: str) -> str:
    """A secret kept between runs, so the login and token stay the same."""
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    value = f"{prefix}{secrets.token_urlsafe(18)}"
    path.write_text(value + "\n")
    path.chmod(0o600)
    return value


def _env(var_dir: Path) -> dict[str, str]:
    """The demo's settings: what production keeps closed, opened on purpose for a laptop."""
    env = dict(os.environ)
    env.setdefault("FLEETWATCH_DEMO", "1")
    env.setdefault("FLEETWATCH_VAR_DIR", str(var_dir))
    # A key of this installation's own, kept between runs so sign-ins survive a restart.
    env.setdefault("SECRET_KEY", _secret_file(var_dir / "demo" / "secret-key", ""))
    env.setdefault("FLEETWATCH_PLAIN_HTTP", "1")  # http://127.0.0.1, no TLS proxy
    env.setdefault("FLEETWATCH_METRICS_PUBLIC", "1")  # /metrics for any local Prometheus
    env.setdefault("DJANGO_SETTINGS_MODULE", "fleetwatch.settings")
    env["PYTHONPATH"] = str(ROOT)
    return env


def _manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([str(BIN / "fleetwatch"), "manage", *args], env=env, cwd=ROOT, check=True)


def _ensure_admin(env: dict[str, str], password: str) -> None:
    script = (
        "from django.contrib.auth import get_user_model\n"
        "U = get_user_model()\n"
        "u, _ = U.objects.get_or_create(username='admin', defaults={'email': 'admin@localhost'})\n"
        "u.is_staff = u.is_superuser = True\n"
        f"u.set_password({password!r})\n"
        "u.save()\n"
    )
    _manage(env, "shell", "-v", "0", "-c", script)


def celery_workers() -> dict[str, list[str]]:
    """Three workers, so neither a long rollup nor a Prometheus that stalls delays an alert
    or a Slack message (fleetwatch/celery.py, docs/operations.md "Alerting"): the alert
    pipeline with two children, so one stuck evaluation leaves the other for Slack and the
    watchdog; the Prometheus pull alone; the bulk storage work alone, one task at a time.
    All prefork (the default pool): only a prefork child can be stopped at its task's hard
    time limit (the solo pool enforces no limit)."""
    return {
        "worker": _worker("worker", ALERT_WORKER_QUEUES, "--concurrency", "2"),
        "pull": _worker("pull", (PULL,), "--concurrency", "1"),
        "maintenance": _worker("maintenance", (MAINTENANCE,), "--concurrency", "1"),
    }


def _worker(name: str, queues: tuple[str, ...], *pool: str) -> list[str]:
    return [
        str(BIN / "fleetwatch"),
        *("worker", "--queues", ",".join(queues), "--name", f"{name}@%h", *pool),
        *("--loglevel", "WARNING", "--without-mingle", "--without-gossip"),
    ]


def main() -> int:
    var_dir = Path(os.environ.get("FLEETWATCH_VAR_DIR", ROOT / "var")).resolve()
    host = os.environ.get("FLEETWATCH_HOST", "127.0.0.1")
    port = os.environ.get("FLEETWATCH_PORT", "8000")
    nodes = os.environ.get("FLEETWATCH_DEMO_NODES", "")  # empty: every node of the site
    env = _env(var_dir)
    demo_dir = var_dir / "demo"
    token = _secret_file(demo_dir / "enroll-token", "fwe_demo_")
    password = _secret_file(demo_dir / "admin-password", "")

    print("Fleetwatch demo: preparing the database in", var_dir, flush=True)
    _manage(env, "migrate", "-v0")
    _manage(env, "seed_demo", "--enroll-token", token)
    _ensure_admin(env, password)

    server = f"http://{host}:{port}"
    commands = {
        "web": [
            str(BIN / "fleetwatch"),
            *("serve", "--host", host, "--port", port, "--log-level", "warning"),
        ],
        **celery_workers(),
        "beat": [
            str(BIN / "fleetwatch"),
            *("beat", "--loglevel", "WARNING", "--schedule", str(var_dir / "celerybeat-schedule")),
        ],
        "simulator": [
            str(BIN / "fleet-agent"),
            "--log-level",
            "warning",
            "simulate",
            "--server",
            server,
            "--enroll-token",
            token,
            *(("--nodes", nodes) if nodes else ()),
            "--spool-dir",
            str(var_dir / "simulator-spool"),
            *_fault_flags(os.environ.get("FLEETWATCH_DEMO_FAULTS", "")),
        ],
    }
    procs: dict[str, subprocess.Popen[bytes]] = {}
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    log_dir = var_dir / "log"
    log_dir.mkdir(parents=True, exist_ok=True)
    _forget_queue_bindings(var_dir)

    def spawn(name: str) -> subprocess.Popen[bytes]:
        # Each process logs to var/log/<name>.log so the terminal keeps the banner.
        log = (log_dir / f"{name}.log").open("ab")
        return subprocess.Popen(commands[name], env=env, cwd=ROOT, stdout=log, stderr=log)

    for name in ("web", *celery_workers(), "beat"):
        procs[name] = spawn(name)
    if not _wait_for_web(server, procs["web"]):
        print(
            f"the web server did not start (is port {port} taken? FLEETWATCH_PORT picks another);"
            f" see {log_dir}/web.log",
            file=sys.stderr,
        )
        _stop_all(procs)
        return 1
    procs["simulator"] = spawn("simulator")
    print(
        "\n"
        f"  Fleetwatch is running:  {server}/\n"
        f"  login:                  admin / {password}\n"
        f"  enrolment token:        {token}\n"
        f"  simulated nodes:        {nodes or 'all'} (GPUs, racks, CDUs, facility meters)\n"
        f"  faults:                 {os.environ.get('FLEETWATCH_DEMO_FAULTS') or 'none'}\n"
        f"  alerts go to:           {_alert_route()}\n"
        f"  logs:                   {log_dir}/{{web,worker,pull,maintenance,beat,simulator}}.log\n"
        "  Ctrl-C stops everything.\n",
        flush=True,
    )
    code = 0
    while not stopping:
        for name, proc in procs.items():
            if proc.poll() is not None:
                print(
                    f"{name} exited with code {proc.returncode}; stopping"
                    f" (see {log_dir}/{name}.log)",
                    file=sys.stderr,
                )
                stopping, code = True, 1
                break
        time.sleep(0.5)
    _stop_all(procs)
    print("Fleetwatch demo stopped.")
    return code


def _forget_queue_bindings(var_dir: Path) -> None:
    """Drop the default exchange's bindings before anything starts: a demo from before the
    queues by job bound every queue to the routing key "celery", so each task would still
    be copied into every queue. Workers and beat declare the bindings they use as they
    start (fleetwatch/broker.py), so nothing needs them kept."""
    (var_dir / "celery" / "control" / "celery.exchange").unlink(missing_ok=True)


def _alert_route() -> str:
    """Where alerts go, without printing the webhook (a secret) in full."""
    url = os.environ.get("SLACK_WEBHOOK_URL", "")
    if not url:
        return "nowhere: set SLACK_WEBHOOK_URL (or add Slack routes in the admin)"
    from fleet.notifications.slack import redact_url

    return (
        f"Slack, SLACK_WEBHOOK_URL ({redact_url(url)}), unless a Slack route in the admin matches"
    )


def _fault_flags(spec: str) -> list[str]:
    """FLEETWATCH_DEMO_FAULTS="cdu-pump-fail:CDU-1@60s+10m rack-overload:B02@2m" → --fault …"""
    return [flag for fault in spec.split() for flag in ("--fault", fault)]


def _wait_for_web(server: str, proc: subprocess.Popen[bytes]) -> bool:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            urllib.request.urlopen(server + "/api/v1/inventory", timeout=1)
        except urllib.error.HTTPError:
            return True
        except OSError:
            time.sleep(0.2)
    return False


def _stop_all(procs: dict[str, subprocess.Popen[bytes]]) -> None:
    # The simulator first, so its last batches reach a live server.
    for name in ("simulator", "beat", *celery_workers(), "web"):
        proc = procs.get(name)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    sys.exit(main())
