"""Prometheus exposition text (what /metrics serves) read back as numbers per series."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]  # (name, sorted labels) -> value


def series(text: str) -> Series:
    """Every sample in `text`, by name and sorted labels."""
    out: Series = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out
