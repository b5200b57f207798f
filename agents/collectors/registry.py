"""Which collectors `run` and `check` use, built from the configuration."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from agents.collectors.base import Collector
from agents.runconfig import AgentConfig, ConfigError

NVML_STAND_INS = "fleet_agent.nvml"
# Each GPU's last energy read, kept beside the spool so that a reset or driver reload while
# the agent was stopped is seen at its start (agents/collectors/gpu_resets.py).
GPU_RESET_STATE = "gpu-resets.json"


def nvml_library(config: AgentConfig) -> Any:
    """The real `pynvml`, or a stand-in another distribution provides for
    `nvml = "<name>:<spec>"`: the server's package adds `fake:<capture dir>[::gpus]`, the
    capture-driven fake NVML the tests and benches use (fleetsim/fake_nvml.py). A node
    installs the agent alone, so it has none."""
    name, sep, spec = config.nvml.partition(":")
    if sep:
        for stand_in in entry_points(group=NVML_STAND_INS, name=name):
            return stand_in.load()(spec)
        raise ConfigError(
            f"nvml = {config.nvml!r}: no NVML stand-in named {name!r} is installed "
            "(the fake comes with the server's package)"
        )
    import pynvml

    return pynvml


def build_collectors(config: AgentConfig) -> list[Collector]:
    collectors: list[Collector] = []
    if config.enabled("gpu") and config.nvml != "off":
        from agents.collectors.gpu import GpuCollector
        from agents.nvml.wrapper import Nvml

        collectors.append(
            GpuCollector(
                Nvml(nvml_library(config)),
                interval_s=config.interval_s,
                throttle_every=config.throttle_every,
                energy_every=config.energy_every,
                pcie_every=config.pcie_every,
                pcie_throughput_every=config.pcie_throughput_every,
                state_path=config.spool_dir / GPU_RESET_STATE,
            )
        )
    if config.enabled("workloads") and config.nvml != "off" and config.workloads_s > 0:
        from agents.attribution.cgroups import ProcReader
        from agents.attribution.slurm import Scontrol
        from agents.collectors.workloads import WorkloadCollector
        from agents.nvml.wrapper import Nvml

        collectors.append(
            WorkloadCollector(
                Nvml(nvml_library(config)),
                ProcReader(config.proc_root),
                interval_s=config.interval_s,
                every_s=config.workloads_s,
                pod_resources_socket=config.kubelet_pod_resources_socket,
                scontrol=Scontrol(config.scontrol),
            )
        )
    if config.enabled("fabric") and config.fabric_s > 0:
        from agents.collectors.fabric import FabricCollector

        collectors.append(FabricCollector(config.sysfs_root, config.interval_s, config.fabric_s))
    if config.enabled("host"):
        from agents.collectors.host import HostCollector

        collectors.append(HostCollector(config.interval_s))
    if config.enabled("power"):
        from agents.collectors.power import IpmiPowerCollector, RedfishPowerCollector

        if config.bmc_url:
            collectors.append(
                RedfishPowerCollector(config.bmc_url, config.bmc_user, config.bmc_password_file)
            )
        else:
            collectors.append(IpmiPowerCollector(config.ipmitool))
    if config.enabled("tuning"):
        from agents.collectors.tuning import TuningCollector

        collectors.append(TuningCollector(max(60.0, config.interval_s)))
    collectors.extend(load_plugins(config))
    return collectors


class PluginError(Exception):
    pass


def load_plugins(config: AgentConfig) -> list[Collector]:
    """Collectors from `plugins = "package.module:factory, …"`: factory(config) -> Collector."""
    loaded: list[Collector] = []
    for entry in filter(None, (e.strip() for e in config.plugins.split(","))):
        module_name, _, attribute = entry.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attribute or "collector")
        except (ImportError, AttributeError) as exc:
            raise PluginError(f"collector plugin {entry!r} cannot be loaded: {exc}") from None
        loaded.append(factory(config))
    return loaded
