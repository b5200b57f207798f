"""Each word, level and rule the pages show has one owner in Python (fleet/words.py,
fleet/health): the browser's scripts render what they are sent and judge nothing.

- the scripts hold no level value, no level word and no phrase fleet/words.py owns;
- what the live pages show comes from the payload: every word a rack tile or a site strip
  shows is in what the server sent;
- the one age formatter the browser keeps (FleetLive.ageWords, for ticking ages between
  pushes) says what fleet/words.py says for the same seconds, hours and days included.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from fleet import health
from fleet.read.site_summary import agents_figures, empty_alerts, facility_figures
from fleet.read.state import rack_modes
from fleet.words import (
    AGE_UNITS,
    COOLING_SOURCE_WORDS,
    LEVEL_WORDS,
    PHRASES,
    SOURCE_WORDS,
    age_words,
    browser_words,
    headroom_words,
    no_data_words,
    power_words,
    pue_words,
)

SCRIPTS = sorted((Path(__file__).parents[2] / "static" / "dashboard").glob("*.js"))
LIVE_JS = Path(__file__).parents[2] / "static" / "dashboard" / "live.js"


def code_of(path: Path) -> str:
    """A script without its comments (they may name what the server sends)."""
    text = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)
    return re.sub(r"(?m)(^|[^:\\])//.*$", r"\1", text)


def string_literals(code: str) -> list[str]:
    return [m.group(2) for m in re.finditer(r"([\"'`])((?:\\.|(?!\1).)*)\1", code)]


def owned_phrases() -> set[str]:
    """Every word and phrase fleet/words.py owns, as pieces a script would have to spell:
    level words, power-source and cooling-source words, the phrases' fixed parts, and
    what the formatters say around their numbers."""
    pieces = {*LEVEL_WORDS.values(), *SOURCE_WORDS.values(), *COOLING_SOURCE_WORDS.values()}
    for template in PHRASES.values():
        pieces.update(p.strip(" ,:()·") for p in re.split(r"\{\w+\}", template))
    pieces.update(["°C to slowdown", "°C past slowdown", "headroom unknown", " MW", "category "])
    pieces.update(f" {word}" for _, _, word in AGE_UNITS if len(word) > 1)
    return {p for p in pieces if len(p.strip()) > 2}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_no_script_holds_a_level_or_a_word_the_server_owns(script: Path) -> None:
    literals = string_literals(code_of(script))
    levels = {level.value for level in health.Level}
    assert not [s for s in literals if s in levels], "a level value in a script: a decision"
    said = [s for s in literals if s not in PHRASES]  # a phrase's name is how it is asked for
    found = [p for p in owned_phrases() for s in said if p in s]
    assert not found, f"{script.name} spells words fleet/words.py owns: {found}"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_no_script_compares_a_figure_to_decide_a_level(script: Path) -> None:
    """A threshold comparison that yields a level (`x > 10 ? "warn"`, `if (x >= y) level =`)."""
    code = code_of(script)
    decisions = re.findall(r"[<>]=?[^;\n?]*\?\s*[\"'](?:ok|warn|crit|unknown)[\"']", code)
    decisions += re.findall(r"(?i)if \([^)]*[<>]=?[^)]*\)\s*\w*level\w*\s*=", code)
    assert not decisions, f"{script.name} judges a level: {decisions}"


def test_the_scan_would_catch_the_old_duplicates() -> None:
    old = 'const L = { ok: "OK", warn: "Warning" }; x >= 9 ? "warn" : "ok"; "no live data"'
    literals = string_literals(old)
    assert "Warning" in literals and "warn" in literals
    assert any(p in s for p in owned_phrases() for s in literals)
    assert re.findall(r"[<>]=?[^;\n?]*\?\s*[\"'](?:ok|warn|crit|unknown)[\"']", old)


# ---- the payload carries every word the page shows


def test_a_rack_payload_carries_its_words_and_a_level_for_every_mode() -> None:
    rack = {
        "level": "crit",
        "reasons": ["1 GPU(s) in thermal slowdown"],
        "loop": "CDU-1",
        "loop_level": "ok",
        "power_kw": 30.0,
        "budget_kw": 130.0,
        "power_pct": 23.0,
        "power_level": "ok",
        "min_headroom_c": -4.0,
        "headroom_level": "crit",
        "headroom_words": headroom_words(-4.0),
        "lost_gpus": 0,
        "lost_level": "ok",
        "lost_words": "",
        "throttling_thermal": 1,
        "throttling_power": 2,
        "throttling_level": "crit",
    }
    modes = rack_modes(rack)
    assert set(modes) == {"overall", "power", "headroom", "throttling"}
    assert modes["power"] == {"level": "ok", "figure": "30.0 of 130 kW (23 % of budget)"}
    assert modes["headroom"] == {"level": "crit", "figure": "hottest GPU 4 °C past slowdown"}
    assert modes["throttling"]["figure"] == "1 in thermal slowdown · 2 at their power limit"
    assert modes["overall"] == {"level": "crit", "figure": "1 GPU(s) in thermal slowdown"}


def test_a_site_payload_carries_the_words_its_strip_shows() -> None:
    now = 1_000_000.0
    reading = health.Reading(
        {"total_power_w": 1_250_000.0, "it_power_w": 1_000_000.0, "pue_category": 2},
        {"total_power_w": now, "it_power_w": now, "pue_category": now},
    )
    figures = facility_figures(reading, now)
    assert figures["total_power_words"] == "1.25 MW" == power_words(1_250_000.0)
    assert figures["it_power_words"] == "1.00 MW"
    assert figures["pue_words"].startswith("1.25 (category 2: ")
    assert figures["cooling_source_words"] == COOLING_SOURCE_WORDS["derived"]
    assert agents_figures({"nodes": 4, "stale": 0, "never": 0}) == {
        "nodes": 4,
        "stale": 0,
        "never": 0,
        "level": "ok",
        "words": "0 of 4 nodes",
    }
    assert empty_alerts()["level"] == "ok"


def test_an_info_alert_leaves_the_strip_and_the_tile_ok() -> None:
    """It used to read "warn" on the site strip and "ok" on the tiles."""
    assert health.severity_level("info") == health.Level.OK
    assert health.severity_level("warning") == health.Level.WARN
    assert health.worst_severity(["info", "critical", "warning"]) == "critical"
    assert health.worst_severity([]) == "info"


def test_an_agent_is_stale_at_the_age_its_data_stops_being_fresh() -> None:
    """`>=`, as `Reading.fresh` and the pages judge: at exactly 30 s a 1 s agent's data no
    longer counts as fresh, so /metrics and the strip count it stale (it used to be `>`)."""
    reading = health.Reading({"cpu_pct": 1.0}, {"cpu_pct": 100.0})
    assert reading.fresh("cpu_pct", 130.0, health.STALE_AFTER_S) is None
    assert health.source_stale(100.0, 130.0, 1.0)
    assert not health.source_stale(100.0, 129.9, 1.0)


# ---- ages: one formatter in Python, one in the browser, the same words


AGE_TABLE = [
    (0, "0 s"),
    (44.5, "45 s"),
    (89.4, "89 s"),
    (90, "2 min"),
    (150, "3 min"),
    (5399, "90 min"),
    (5400, "2 h"),
    (3 * 3600, "3 h"),
    (35 * 3600, "35 h"),
    (36 * 3600, "2 d"),
    (10 * 86400, "10 d"),
]


@pytest.mark.parametrize(("seconds", "words"), AGE_TABLE)
def test_an_age_reads_in_the_unit_an_operator_expects(seconds: float, words: str) -> None:
    assert age_words(seconds) == words


def test_a_rack_quiet_for_three_hours_reads_three_hours() -> None:
    assert no_data_words(0.0, 3 * 3600.0) == "no data for 3 h"


def test_the_words_a_page_embeds_are_json_and_complete() -> None:
    words = json.loads(json.dumps(browser_words()))
    assert words["levels"] == {str(k): v for k, v in LEVEL_WORDS.items()}
    assert words["level_order"] == ["ok", "unknown", "warn", "crit"]
    assert words["phrases"] == PHRASES


@pytest.mark.browser
def test_the_browser_ages_as_python_does(browser: Any) -> None:
    """The table test: FleetLive.ageWords, fed the server's words, for the same seconds
    (every range, the rounding of halves included) says what `age_words` says."""
    seconds = [s for s, _ in AGE_TABLE] + [0.5, 1.5, 2.5, 89.5, 134.9, 135, 7199, 129599, 1e7]
    page = browser.new_page()
    try:
        words = json.dumps(browser_words()).replace("</", "<\\/")
        script = LIVE_JS.read_text().replace("</", "<\\/")  # its comments name tags
        page.set_content(
            f'<main></main><script id="fleet-words" type="application/json">{words}</script>'
            f"<script>{script}</script>"
        )
        said = page.evaluate("(xs) => xs.map((s) => FleetLive.ageWords(s))", seconds)
        assert said == [age_words(s) for s in seconds]
        quiet = page.evaluate("() => [FleetLive.quietWords(null), FleetLive.quietWords(10800)]")
        assert quiet == [no_data_words(None, 0.0), no_data_words(0.0, 10800.0)]
        levels = page.evaluate("() => [FleetLive.levelWord('warn'), FleetLive.worst([])]")
        assert levels == [LEVEL_WORDS[health.Level.WARN], "ok"]
        worst = page.evaluate("() => FleetLive.worst(['ok', 'crit', 'unknown'])")
        assert worst == "crit"
        said = page.evaluate("() => FleetLive.say('alerts_on_rack', {n: 2, severity: 'warning'})")
        assert said == PHRASES["alerts_on_rack"].format(n=2, severity="warning")
    finally:
        page.close()


def test_pue_words_say_the_category_with_the_figure() -> None:
    assert pue_words(None, None, None) == "no data"
    assert pue_words(1.3, 2, "IT metered at the PDU outlets") == (
        "1.30 (category 2: IT metered at the PDU outlets)"
    )
