from __future__ import annotations

from agents.protocol import reasons


def test_every_reason_bit_decodes_to_its_own_name() -> None:
    for bit, name, _meaning in reasons.REASONS:
        assert reasons.decode(bit) == [name]


def test_several_bits_decode_in_bit_order_and_unknown_bits_are_named() -> None:
    mask = reasons.HW_THERMAL_SLOWDOWN | reasons.SW_POWER_CAP | 0x400
    assert reasons.decode(mask) == ["power_cap", "hw_thermal", "bit_0x400"]


def test_no_bits_means_no_reasons() -> None:
    assert reasons.decode(0) == []


def test_the_h200_supported_mask_covers_every_named_reason() -> None:
    supported = 511  # nvml_inventory.json: supported_clock_event_reasons
    assert reasons.decode(supported) == [name for _, name, _ in reasons.REASONS]
