"""Enumerations of the domain, as Django TextChoices (NetBox's `choices.py`)."""

from __future__ import annotations

from django.db import models


class RackCoolingChoices(models.TextChoices):
    AIR = "air", "Air"
    REAR_DOOR = "rear_door", "Rear-door heat exchanger"
    DIRECT_LIQUID = "direct_liquid", "Direct liquid (cold plate)"
    IMMERSION = "immersion", "Immersion"

    @classmethod
    def liquid(cls) -> frozenset[str]:
        return frozenset({cls.REAR_DOOR, cls.DIRECT_LIQUID, cls.IMMERSION})


class PowerFeedPhaseChoices(models.TextChoices):
    SINGLE = "single", "Single phase"
    THREE = "three", "Three phase"


class PowerFeedTypeChoices(models.TextChoices):
    PRIMARY = "primary", "Primary"
    REDUNDANT = "redundant", "Redundant"


class LiquidClassChoices(models.TextChoices):
    """ASHRAE TC 9.9 facility-water classes: the number is the max supply °C."""

    W17 = "W17", "W17 (≤17 °C supply)"
    W27 = "W27", "W27 (≤27 °C supply)"
    W32 = "W32", "W32 (≤32 °C supply)"
    W40 = "W40", "W40 (≤40 °C supply)"
    W45 = "W45", "W45 (≤45 °C supply)"
    W_PLUS = "W+", "W+ (>45 °C supply)"

    @classmethod
    def supply_limit_c(cls, value: str) -> float | None:
        return {"W17": 17.0, "W27": 27.0, "W32": 32.0, "W40": 40.0, "W45": 45.0}.get(value)


class PueCategoryChoices(models.IntegerChoices):
    """ISO/IEC 30134-2: where IT energy is measured."""

    CAT0 = 0, "Category 0 (UPS output, peak demand)"
    CAT1 = 1, "Category 1 (UPS output)"
    CAT2 = 2, "Category 2 (PDU output)"
    CAT3 = 3, "Category 3 (IT equipment input)"


class MeterRoleChoices(models.TextChoices):
    UTILITY = "utility", "Utility / total facility"
    UPS_OUTPUT = "ups_output", "UPS output (IT, category 1)"
    PDU_OUTPUT = "pdu_output", "PDU output (IT, category 2)"
    IT_INPUT = "it_input", "IT equipment input (category 3)"
    COOLING = "cooling", "Cooling plant"


class SourceKindChoices(models.TextChoices):
    NODE = "node", "Node agent"
    RACK = "rack", "Rack collector"
    LOOP = "loop", "Cooling-loop collector"
    SITE = "site", "Facility agent"
