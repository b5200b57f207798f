"""The signal catalogue agrees with the metric catalogue, fleet.health and the pack."""

from __future__ import annotations

from agents.protocol.metrics import METRICS
from fleet import health
from fleet.alerts import signals
from fleet.alerts.choices import RuleScopeChoices
from fleet.alerts.rulepack import BUILTIN_RULES


def test_every_built_in_rule_names_a_signal_at_its_scope() -> None:
    for spec in BUILTIN_RULES:
        assert signals.get(spec.scope, spec.signal) is not None, spec.key


def test_every_raw_metric_signal_exists_in_the_metric_catalogue() -> None:
    for signal in signals.SIGNALS:
        if (metric := signal.raw_metric) is not None:
            kind = signals.SCOPE_SAMPLE_KIND[signal.scope]
            assert metric in {m.name for m in METRICS[kind]}, signal.key


def test_every_health_source_names_a_function_in_fleet_health() -> None:
    for signal in signals.SIGNALS:
        if signal.source.startswith("health:"):
            function = signal.source.removeprefix("health:").split(".")[0]
            assert callable(getattr(health, function, None)), signal.key


def test_every_event_source_is_an_event_kind_of_the_protocol() -> None:
    kinds = {"xid", "ecc_sbe", "ecc_dbe", "gpu_lost", "collector_error", "note"}
    for signal in signals.SIGNALS:
        if signal.source.startswith("events:"):
            assert signal.source.removeprefix("events:") in kinds, signal.key


def test_signals_are_unique_per_scope_and_every_scope_is_a_rule_scope() -> None:
    assert len(signals.BY_KEY) == len(signals.SIGNALS)
    assert {s.scope for s in signals.SIGNALS} == set(RuleScopeChoices.values)


def test_counters_are_not_raw_signals() -> None:
    # A threshold on a cumulative counter means nothing.
    assert signals.get("gpu", "energy_j") is None
    assert signals.get("gpu", "temp_gpu_c") is not None
