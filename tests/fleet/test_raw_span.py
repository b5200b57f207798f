"""FLEETWATCH_RAW_PACK_MINUTES: the packed span's width, and the raw partitions' with it."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from fleet.storage import raw_span
from fleet.storage.partitions import Family, ahead_count, partition_name, slot

T = 1_800_000_000  # an hour boundary


def test_unset_packs_hourly_spans_in_hourly_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(raw_span.ENV, raising=False)
    assert raw_span.packing_enabled()
    assert slot("raw", T + 1234) == (T, T + 3600)
    assert partition_name(Family("gpu", "raw"), T) == "fw_gpu_raw_p20270115t08"
    assert ahead_count("raw") == 24


def test_five_minutes_cuts_raw_partitions_of_five_minutes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(raw_span.ENV, "5")
    assert raw_span.span_s() == 300
    assert slot("raw", T + 1234) == (T + 1200, T + 1500)
    assert partition_name(Family("gpu", "raw"), T + 1200) == "fw_gpu_raw_p20270115t0820"
    assert ahead_count("raw") == 24 * 12  # still a day ahead
    assert slot("1m", T + 1234)[1] - slot("1m", T + 1234)[0] == 86400  # rollups unchanged


def test_off_keeps_hourly_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(raw_span.ENV, "0")
    assert not raw_span.packing_enabled()
    assert raw_span.span_s() == 3600


@pytest.mark.parametrize("value", ["7", "-5", "ten", "120"])
def test_a_width_that_does_not_divide_the_hour_is_refused(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(raw_span.ENV, value)
    with pytest.raises(ImproperlyConfigured, match=raw_span.ENV):
        raw_span.pack_minutes()
