"""Generate docs/metrics.md from the catalogue.

python -m agents.protocol.docs > docs/metrics.md
"""

from __future__ import annotations

import sys

from agents.protocol.metrics import ENTITY_KEYS, METRICS
from agents.protocol.reasons import REASONS


def render() -> str:
    lines = [
        "# Metrics (protocol v1)",
        "",
        "Generated from `agents/protocol/metrics.py` by `python -m agents.protocol.docs`;"
        " do not edit by hand. An unsupported field is left out of a sample, never sent as 0.",
        "",
    ]
    for kind, metrics in METRICS.items():
        keys = ", ".join(f"`{k}`" for k in ("ts", *ENTITY_KEYS[kind]))
        lines += [f"## `{kind}` samples", "", f"Keys: {keys}.", ""]
        lines += ["| metric | type | range | meaning |", "|---|---|---|---|"]
        for m in metrics:
            kind_word = m.kind + (", integer" if m.integer else "")
            lines.append(f"| `{m.name}` | {kind_word} | {m.lo:g} – {m.hi:g} | {m.help} |")
        lines.append("")
    lines += ["## Clock-event reasons (`clock_event_reasons`)", ""]
    lines += ["| bit | name | meaning |", "|---|---|---|"]
    lines += [f"| `{bit:#x}` | `{name}` | {meaning} |" for bit, name, meaning in REASONS]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
