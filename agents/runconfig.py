"""Configuration for `run` and `check`: defaults < TOML file < FLEET_AGENT_* environment < flags.

```toml
# /etc/fleet-agent/agent.toml
server = "https://fleet.example"
token_file = "/var/lib/fleet-agent/token"
interval_s = 1.0
[spool]
dir = "/var/lib/fleet-agent/spool"
max_mb = 256
```

Every key can also be set as `FLEET_AGENT_<KEY>` (nested keys joined by `_`, e.g.
`FLEET_AGENT_SPOOL_MAX_MB=64`) and as a flag (`--spool-max-mb 64`), except the
`[[facility.targets]]` tables (docs/facility.md), which only a file can hold.
"""

from __future__ import annotations

import argparse
import os
import socket
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from agents.protocol import MAX_INTERVAL_S, MIN_INTERVAL_S


class ConfigError(Exception):
    pass


@dataclass(slots=True)
class AgentConfig:
    server: str = ""
    token_file: Path = Path("/var/lib/fleet-agent/token")
    source: str = ""
    interval_s: float = 1.0
    spool_dir: Path = Path("/var/lib/fleet-agent/spool")
    spool_max_mb: float = 256.0
    flush_timeout_s: float = 10.0
    http_fallback: bool = True
    backoff_cap_s: float = 30.0
    # Slow NVML reads, in ticks (docs/agent.md explains the figures).
    throttle_every: int = 10
    energy_every: int = 30
    pcie_every: int = 60
    pcie_throughput_every: int = 300  # 0: never (each read sleeps ~42 ms per GPU)
    nvml: str = "auto"  # auto | off | fake:<capture dir> (tests and benches)
    bmc_url: str = ""
    bmc_user: str = ""
    bmc_password_file: str = ""
    ipmitool: str = "ipmitool"
    collectors: str = "gpu,host,power,tuning,workloads,fabric"
    # Collector plugins: "package.module:factory" entries, comma-separated; each factory
    # takes the AgentConfig and returns a Collector (see docs/agent.md).
    plugins: str = ""
    log_level: str = "info"
    # Who runs on each GPU (docs/agent.md): seconds between reads on the slow lane (0: off);
    # the /proc the PIDs are looked up in (the host's: run in the host PID namespace); the
    # kubelet's pod-resources socket ("": not asked); scontrol for Slurm jobs ("": not run).
    workloads_s: float = 10.0
    proc_root: Path = Path("/proc")
    kubelet_pod_resources_socket: str = ""
    scontrol: str = "scontrol"
    # InfiniBand/RoCE ports (docs/agent.md): seconds between reads on the slow lane (0: off),
    # and the sysfs they are read from (tests point it at recorded trees).
    fabric_s: float = 10.0
    sysfs_root: Path = Path("/sys")
    # `[[facility.targets]]`: the devices a facility agent polls (docs/facility.md). The
    # tables are checked by `agents.facility.targets.build_collectors`, not here.
    facility_targets: list[dict[str, Any]] = field(default_factory=list)

    def is_site(self) -> bool:
        """A facility agent: it sends its site's samples, not a node's (docs/protocol.md)."""
        return self.resolved_source().startswith("site:")

    def resolved_source(self) -> str:
        return self.source or f"node:{socket.gethostname()}"

    def enabled(self, collector: str) -> bool:
        return collector in {c.strip() for c in self.collectors.split(",")}


_TOML_KEYS = {"spool": {"dir": "spool_dir", "max_mb": "spool_max_mb"}}
# Lists of tables: a file can hold them, an environment variable or a flag cannot.
_FILE_ONLY = frozenset({"facility_targets"})


def _flatten(data: dict[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            renames = _TOML_KEYS.get(key, {})
            for sub, inner in value.items():
                flat[renames.get(sub, f"{key}_{sub}")] = inner
        else:
            flat[key] = value
    return flat


def _coerce(name: str, value: Any) -> Any:
    if name in _FILE_ONLY:
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise ConfigError("facility.targets must be a list of [[facility.targets]] tables")
        return value
    kind = type(getattr(AgentConfig(), name))
    try:
        if kind is bool and isinstance(value, str):
            lowered = value.strip().lower()
            if lowered not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(value)
            return lowered in ("1", "true", "yes", "on")
        return kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: {value!r} is not a valid {kind.__name__}") from None


def load_config(
    config_file: Path | None, env: dict[str, str], flags: dict[str, Any]
) -> AgentConfig:
    values: dict[str, Any] = {}
    if config_file is not None:
        try:
            values.update(_flatten(tomllib.loads(config_file.read_text())))
        except FileNotFoundError:
            raise ConfigError(f"config file {config_file} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{config_file}: {exc}") from None
    known = {f.name for f in fields(AgentConfig)}
    unknown = set(values) - known
    if unknown:
        raise ConfigError(f"unknown setting(s) in {config_file}: {', '.join(sorted(unknown))}")
    for name in known - _FILE_ONLY:
        env_value = env.get(f"FLEET_AGENT_{name.upper()}")
        if env_value is not None:
            values[name] = env_value
        if flags.get(name) is not None:
            values[name] = flags[name]
    config = AgentConfig(**{k: _coerce(k, v) for k, v in values.items()})
    if not MIN_INTERVAL_S <= config.interval_s <= MAX_INTERVAL_S:
        # Every batch declares it (`cadence`): the server would refuse each one outside these.
        raise ConfigError(
            f"interval_s must be between {MIN_INTERVAL_S:g} and {MAX_INTERVAL_S:g} seconds"
        )
    return config


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, default=None, help="TOML file")
    for spec in fields(AgentConfig):
        flag = "--" + spec.name.replace("_", "-")
        if spec.name == "log_level" or spec.name in _FILE_ONLY:
            continue  # a global flag; tables only in the file
        parser.add_argument(
            flag, dest=spec.name, default=None, help=f"(env FLEET_AGENT_{spec.name.upper()})"
        )


def config_from_args(args: argparse.Namespace) -> AgentConfig:
    flags = {f.name: getattr(args, f.name, None) for f in fields(AgentConfig)}
    flags["log_level"] = None
    config_file = args.config
    if config_file is None and os.environ.get("FLEET_AGENT_CONFIG"):
        config_file = Path(os.environ["FLEET_AGENT_CONFIG"])
    return load_config(config_file, dict(os.environ), flags)
