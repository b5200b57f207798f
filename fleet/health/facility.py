"""PUE and its ISO/IEC 30134-2 category."""

from __future__ import annotations

from fleet.health.levels import Reading
from fleet.health.thresholds import PUE_CATEGORIES, STALE_AFTER_S


def pue(total_power_w: float | None, it_power_w: float | None) -> float | None:
    """PUE = total facility power / IT power (The Green Grid; ISO/IEC 30134-2)."""
    if total_power_w is None or it_power_w is None or it_power_w <= 0:
        return None
    return float(total_power_w) / float(it_power_w)


def pue_category(category: int | None) -> str | None:
    """Where IT power was measured for an ISO/IEC 30134-2 category (0–3), else None."""
    return None if category is None else PUE_CATEGORIES.get(int(category))


def facility_pue(
    reading: Reading, now: float, stale_after_s: float = STALE_AFTER_S
) -> tuple[float | None, int | None]:
    """A site's live PUE and its category from its `facility` sample: total / IT, else the
    reported `pue`. Instantaneous, so operational, not a reportable (annual) PUE; a figure
    without a known category is withheld, as PUE v2 requires the category with every figure."""
    raw_cat = reading.fresh("pue_category", now, stale_after_s)
    category = None if raw_cat is None else int(raw_cat)
    if pue_category(category) is None:
        return None, None
    value = pue(
        reading.fresh("total_power_w", now, stale_after_s),
        reading.fresh("it_power_w", now, stale_after_s),
    )
    if value is None and (reported := reading.fresh("pue", now, stale_after_s)) is not None:
        value = float(reported)
    return value, category
