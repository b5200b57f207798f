"""Enumerations of alert rules, as Django TextChoices (NetBox's `choices.py`)."""

from __future__ import annotations

from django.db import models


class RuleScopeChoices(models.TextChoices):
    """What one alert instance is about: one GPU, one node, … one site."""

    GPU = "gpu", "GPU"
    NODE = "node", "Node"
    RACK = "rack", "Rack"
    FEED = "feed", "Power feed"
    LOOP = "loop", "Cooling loop"
    SITE = "site", "Site"


class RuleComparisonChoices(models.TextChoices):
    ABOVE = "gt", "above (>)"
    AT_OR_ABOVE = "ge", "at or above (≥)"
    BELOW = "lt", "below (<)"
    AT_OR_BELOW = "le", "at or below (≤)"

    @classmethod
    def rising(cls) -> frozenset[str]:
        """Comparisons where higher is worse: the clear threshold sits at or below."""
        return frozenset({cls.ABOVE, cls.AT_OR_ABOVE})


class RuleSeverityChoices(models.TextChoices):
    INFO = "info", "Info"
    WARNING = "warning", "Warning"
    CRITICAL = "critical", "Critical"


# Badge colours per severity, next to the values (NetBox's ChoiceSet colours).
SEVERITY_COLORS: dict[str, str] = {"info": "blue", "warning": "orange", "critical": "red"}
