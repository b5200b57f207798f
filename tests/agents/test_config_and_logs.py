from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from agents import log
from agents.runconfig import ConfigError, load_config


def test_settings_come_from_file_then_environment_then_flags(tmp_path: Path) -> None:
    config_file = tmp_path / "agent.toml"
    config_file.write_text(
        'server = "https://from-file"\ninterval_s = 2.0\n[spool]\ndir = "/srv/spool"\nmax_mb = 64\n'
    )
    env = {"FLEET_AGENT_INTERVAL_S": "0.5", "FLEET_AGENT_HTTP_FALLBACK": "no"}
    config = load_config(config_file, env, {"server": "https://from-flag"})
    assert config.server == "https://from-flag"
    assert config.interval_s == 0.5
    assert config.spool_dir == Path("/srv/spool") and config.spool_max_mb == 64
    assert config.http_fallback is False


def test_an_unknown_setting_is_an_error_not_a_silent_default(tmp_path: Path) -> None:
    config_file = tmp_path / "agent.toml"
    config_file.write_text('sever = "https://typo"\n')
    with pytest.raises(ConfigError, match=r"unknown setting.*sever"):
        load_config(config_file, {}, {})


def test_a_malformed_value_names_the_setting() -> None:
    with pytest.raises(ConfigError, match="interval_s"):
        load_config(None, {"FLEET_AGENT_INTERVAL_S": "fast"}, {})
    with pytest.raises(ConfigError, match="http_fallback"):
        load_config(None, {"FLEET_AGENT_HTTP_FALLBACK": "maybe"}, {})


def test_logs_are_one_json_object_per_line_with_their_fields() -> None:
    stream = io.StringIO()
    log.configure("info", stream)
    try:
        log.get_logger("agents.test").warning("spool full", dropped=3, source="node:n1")
        log.get_logger("agents.test").debug("not shown at info")
    finally:
        log.configure("warning")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["level"] == "warning" and record["msg"] == "spool full"
    assert record["dropped"] == 3 and record["source"] == "node:n1"


def test_collector_plugins_are_loaded_from_the_configuration() -> None:
    from agents.collectors.registry import PluginError, build_collectors

    config = load_config(None, {}, {"collectors": "", "plugins": "tests.agents.plugin_example"})
    (plugin,) = build_collectors(config)
    assert plugin.name == "ib-ports"
    assert plugin.collect(1_795_996_288.0).samples["node"][0]["net_rx_bytes_s"] == 1234.0
    broken = load_config(None, {}, {"collectors": "", "plugins": "tests.agents.nowhere:make"})
    with pytest.raises(PluginError, match="cannot be loaded"):
        build_collectors(broken)
