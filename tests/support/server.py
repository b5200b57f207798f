"""A real Fleetwatch backend for tests: uvicorn in a subprocess on a free
loopback port, over its own fresh database (SQLite file, or a new PostgreSQL
database in the services tier), with a small seeded site.

    with FleetServer.started(tmp_path) as server:
        server.url, server.enroll_token, server.count("gpu"), server.stop(), server.start()
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fleetwatch.serve import UVICORN_LIMITS
from tests.support import services
from tests.support.processes import stop_process

ROOT = Path(__file__).resolve().parents[2]
ENROLL_TOKEN = "fwe_test-enrolment-token"
TEST_SECRET_KEY = "fleetwatch-tests-only-not-secret"  # settings require one outside the demo
METRICS_TOKEN = "fwm_test-metrics-token"  # /metrics is closed without it


SQLITE_FILE = "fleetwatch.sqlite3"  # in FLEETWATCH_VAR_DIR (fleetwatch/settings.py)
# Databases migrated once per test run, by tier and extra environment, for each new server
# to start from a copy: `migrate` takes seconds (a Django start and hundreds of synced
# commits), a copy milliseconds. The SQLite file's path, or the PostgreSQL template's name.
_migrated: dict[tuple[object, ...], str] = {}


def migrated_sqlite(extra_env: dict[str, str]) -> Path:
    key = ("embedded", tuple(sorted(extra_env.items())))
    if key not in _migrated:
        var_dir = Path(tempfile.mkdtemp(prefix="fleetwatch-migrated-"))
        atexit.register(shutil.rmtree, var_dir, True)
        FleetServer(var_dir, extra_env=extra_env).manage("migrate", "-v0")
        _migrated[key] = str(var_dir / SQLITE_FILE)
    return Path(_migrated[key])


def seeded_sqlite(extra_env: dict[str, str], seed_args: tuple[str, ...]) -> Path:
    """Migrated, then seeded by `manage.py seed_demo *seed_args` (deterministic: the same
    arguments give the same site), once per run."""
    key = ("embedded", tuple(sorted(extra_env.items())), seed_args)
    if key not in _migrated:
        var_dir = Path(tempfile.mkdtemp(prefix="fleetwatch-seeded-"))
        atexit.register(shutil.rmtree, var_dir, True)
        maker = FleetServer(var_dir, extra_env=extra_env)
        maker.migrate()
        maker.manage("seed_demo", *seed_args)
        _migrated[key] = str(var_dir / SQLITE_FILE)
    return Path(_migrated[key])


def migrated_postgres(extra_env: dict[str, str]) -> str:
    key = ("services", tuple(sorted(extra_env.items())))
    if key not in _migrated:
        name = f"fwtpl_{uuid.uuid4().hex[:10]}"
        admin = services.services_database_url()
        url = services.create_database(admin, name)
        atexit.register(services.drop_database, admin, name)
        var_dir = Path(tempfile.mkdtemp(prefix="fleetwatch-migrated-"))
        atexit.register(shutil.rmtree, var_dir, True)
        FleetServer(var_dir, database_url=url, extra_env=extra_env).manage("migrate", "-v0")
        _migrated[key] = name
    return _migrated[key]


def copy_sqlite(source: Path, target: Path) -> None:
    with (
        contextlib.closing(sqlite3.connect(source)) as src,
        contextlib.closing(sqlite3.connect(target)) as dst,
    ):
        src.backup(dst)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FleetServer:
    def __init__(
        self,
        var_dir: Path,
        *,
        database_url: str | None = None,
        redis_url: str | None = None,
        racks: int = 8,  # A01–A08: 32 nodes of 4 (the demo plan), enough distinct nodes per module
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.var_dir = var_dir
        self.database_url = database_url
        self.redis_url = redis_url
        self.racks = racks
        self.port = free_port()
        self.enroll_token = ENROLL_TOKEN
        self.migrated = False  # its PostgreSQL database was made from a migrated template
        self.proc: subprocess.Popen[bytes] | None = None
        self.extra_env = extra_env or {}
        self.log_path = var_dir / f"server-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        for key in ("DATABASE_URL", "REDIS_URL"):
            env.pop(key, None)
        env.update(
            {
                "FLEETWATCH_VAR_DIR": str(self.var_dir),
                "FLEETWATCH_TESTING": "1",
                "SECRET_KEY": TEST_SECRET_KEY,
                "FLEETWATCH_PLAIN_HTTP": "1",  # loopback, no TLS
                "FLEETWATCH_METRICS_TOKEN": METRICS_TOKEN,
                "FLEETWATCH_LIVE_INTERVAL_S": "0.2",
                "FLEETWATCH_REVALIDATE_S": "0.5",
                "DJANGO_SETTINGS_MODULE": "fleetwatch.settings",
                "PYTHONPATH": str(ROOT),
            }
        )
        if self.database_url:
            env["DATABASE_URL"] = self.database_url
        if self.redis_url:
            env["REDIS_URL"] = self.redis_url
        env.update(self.extra_env)
        return env

    def manage(self, *args: str) -> str:
        out = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *args],
            env=self.env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if out.returncode:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}")
        return out.stdout

    def prepare(self) -> None:
        seed = ("--racks", str(self.racks), "--enroll-token", self.enroll_token)
        sqlite_file = self.var_dir / SQLITE_FILE
        if self.database_url is None and not sqlite_file.exists():
            self.var_dir.mkdir(parents=True, exist_ok=True)
            copy_sqlite(seeded_sqlite(self.extra_env, seed), sqlite_file)
            return
        self.migrate()
        self.manage("seed_demo", *seed)

    def migrate(self) -> None:
        """Its database at the newest schema: a new one starts as a copy of a migrated one."""
        self.var_dir.mkdir(parents=True, exist_ok=True)
        sqlite_file = self.var_dir / SQLITE_FILE
        if self.database_url is None and not sqlite_file.exists():
            copy_sqlite(migrated_sqlite(self.extra_env), sqlite_file)
        elif not self.migrated:
            self.manage("migrate", "-v0")

    def start(self) -> None:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "fleetwatch.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--lifespan",
                "off",
                *UVICORN_LIMITS,
                "--log-level",
                "warning",
            ],
            env=self.env(),
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log_path.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(self.url + "/api/v1/inventory", timeout=1)
            except urllib.error.HTTPError:
                return  # it answers (401 without a token)
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("server did not start in 30 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            stop_process(self.proc, 20)
        self.proc = None

    def kill(self) -> None:
        """Stop abruptly, as a crash or power cut would (SIGKILL, no cleanup)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        # Its writer process sees the socket close and exits by itself.

    def sibling(self) -> FleetServer:
        """A second server process on the same database (and channel layer): start() it."""
        return FleetServer(
            self.var_dir,
            database_url=self.database_url,
            redis_url=self.redis_url,
            racks=self.racks,
            extra_env=dict(self.extra_env),
        )

    @contextlib.contextmanager
    def with_siblings(self, count: int) -> Iterator[list[FleetServer]]:
        """This (started) server and `count` more processes on its database and channel
        layer, all started: several server processes, as behind a proxy. The siblings are
        stopped on the way out."""
        siblings: list[FleetServer] = []
        try:
            for _ in range(count):
                siblings.append(self.sibling())
                siblings[-1].start()
            yield [self, *siblings]
        finally:
            for sibling in siblings:
                sibling.stop()

    # -- reading what was stored -------------------------------------------
    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.database_url:
            import psycopg

            from fleet.storage.db import pg_conninfo
            from fleetwatch.env import database_from_url

            with psycopg.connect(pg_conninfo(database_from_url(self.database_url))) as conn:
                return list(conn.execute(sql.replace("?", "%s"), params).fetchall())  # type: ignore[arg-type]
        with contextlib.closing(sqlite3.connect(self.var_dir / SQLITE_FILE)) as conn:
            return list(conn.execute(sql, params).fetchall())

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        """One write statement, committed (for tests that set up data by hand)."""
        if self.database_url:
            import psycopg

            from fleet.storage.db import pg_conninfo
            from fleetwatch.env import database_from_url

            with psycopg.connect(pg_conninfo(database_from_url(self.database_url))) as conn:
                conn.execute(sql.replace("?", "%s"), params)  # type: ignore[arg-type]
            return
        with contextlib.closing(sqlite3.connect(self.var_dir / SQLITE_FILE)) as conn:
            conn.execute(sql, params)
            conn.commit()

    def count(self, kind: str, where: str = "1=1", params: tuple[Any, ...] = ()) -> int:
        return int(self.query(f"SELECT count(*) FROM fw_{kind}_raw WHERE {where}", params)[0][0])

    # -- lifecycle ---------------------------------------------------------
    @classmethod
    @contextlib.contextmanager
    def started(cls, var_dir: Path, tier: str = "embedded", **kwargs: Any) -> Iterator[FleetServer]:
        db_name = None
        with contextlib.ExitStack() as own:
            if tier == "services":
                db_name = f"fwtest_{uuid.uuid4().hex[:10]}"
                template = migrated_postgres(kwargs.get("extra_env") or {})
                kwargs["database_url"] = services.create_database(
                    services.services_database_url(), db_name, template=template
                )
                if not kwargs.get("redis_url"):
                    # a Redis of its own: channel groups and queues are named alike in every
                    # test's server, and other test processes may run beside this one
                    kwargs["redis_url"] = own.enter_context(services.private_redis())
            server = cls(var_dir, **kwargs)
            server.migrated = db_name is not None
            try:
                server.prepare()
                server.start()
                yield server
            finally:
                server.stop()
            if db_name:
                services.drop_database(services.services_database_url(), db_name)
