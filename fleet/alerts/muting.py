"""Silences and maintenance windows: which alerts are not notified right now.

A silence mutes every alert whose labels match all its matchers (Alertmanager's
semantics: `=`, `!=`, and `=~` / `!~` with a regular expression anchored at both ends).
Regular expressions are RE2's (google-re2), the syntax and the guarantee of Alertmanager's
Go regexp: matching takes time linear in the label's length, so no pattern can backtrack
for minutes inside an evaluation (`(a+)+$` against "aaaa…b" is as quick as any); a pattern
RE2 cannot do (backreferences, lookaround) is refused. Every matcher's value is at most
`MATCHER_VALUE_MAX_CHARS` long, and a compiled pattern at most `PATTERN_MAX_MEM_BYTES`.
A maintenance window mutes the alerts of one site, rack, node or cooling loop (the loop
and the racks it cools). Muting only holds
messages back: instances still go pending → firing → resolved with their history, and
one still firing when its mute ends is announced then (fleet/alerts/notify.py).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any, Protocol

import re2

__all__ = (
    "MATCHER_VALUE_MAX_CHARS",
    "OPS",
    "PATTERN_MAX_MEM_BYTES",
    "Matcher",
    "Mutes",
    "matchers_text",
    "parse_matchers",
    "silence_errors",
)

OPS = ("=", "!=", "=~", "!~")
_LABEL = re.compile(r"^[a-z_][a-z0-9_]*$")
# A matcher's value (a plain value or a regular expression), in characters: a label value
# or an alternation of a few dozen racks fits with room to spare; the cap bounds what one
# matcher costs per alert and per evaluation.
MATCHER_VALUE_MAX_CHARS = 500
# RE2 compiles a pattern into a program within this memory, else refuses it (RE2's default
# is 8 MiB; a pattern within MATCHER_VALUE_MAX_CHARS that needs more is a repetition bomb).
PATTERN_MAX_MEM_BYTES = 1 << 20


class Pattern(Protocol):
    """What a matcher needs of a compiled regular expression."""

    def fullmatch(self, text: str) -> object | None: ...


def _re2_options() -> Any:
    options = re2.Options()
    options.max_mem = PATTERN_MAX_MEM_BYTES
    options.log_errors = False  # the error comes back to the caller, not to stderr
    return options


_OPTIONS = _re2_options()


def compile_pattern(value: str) -> Pattern:
    """`value` as an RE2 regular expression; ValueError (saying why) when RE2 refuses it."""
    try:
        return re2.compile(value, _OPTIONS)  # type: ignore[no-any-return]
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise ValueError(str(reason)) from None


@dataclass(frozen=True, slots=True)
class Matcher:
    label: str
    op: str
    value: str
    pattern: Pattern | None = None

    def matches(self, labels: dict[str, Any]) -> bool:
        # A label the alert lacks reads as "" (as in Alertmanager): `rack!=A01` matches it.
        have = str(labels.get(self.label, ""))
        if self.op == "=":
            return have == self.value
        if self.op == "!=":
            return have != self.value
        assert self.pattern is not None
        found = self.pattern.fullmatch(have) is not None
        return found if self.op == "=~" else not found


def parse_matchers(raw: Any) -> tuple[list[Matcher], list[str]]:
    """The matchers of a silence, and what is wrong with them (one message each)."""
    if not isinstance(raw, list) or not raw:
        return [], ["give at least one matcher: a list of {label, op, value}"]
    matchers: list[Matcher] = []
    errors: list[str] = []
    for n, item in enumerate(raw, 1):
        if not isinstance(item, dict) or set(item) != {"label", "op", "value"}:
            errors.append(f"matcher {n}: needs exactly the keys label, op and value")
            continue
        label, op, value = item["label"], item["op"], item["value"]
        if not isinstance(label, str) or not _LABEL.match(label):
            errors.append(f"matcher {n}: label {label!r} is not a label name")
            continue
        if op not in OPS:
            errors.append(f"matcher {n}: op {op!r} is not one of {' '.join(OPS)}")
            continue
        if not isinstance(value, str):
            errors.append(f"matcher {n}: value must be a string")
            continue
        if len(value) > MATCHER_VALUE_MAX_CHARS:
            errors.append(
                f"matcher {n}: value of {label} is {len(value):,} characters long;"
                f" at most {MATCHER_VALUE_MAX_CHARS}"
            )
            continue
        pattern = None
        if op in ("=~", "!~"):
            try:
                pattern = compile_pattern(value)
            except ValueError as exc:
                errors.append(
                    f"matcher {n}: {value!r} is not a regular expression RE2 accepts ({exc});"
                    " the syntax is Alertmanager's (Go/RE2): no backreferences or lookaround"
                )
                continue
        matchers.append(Matcher(label, op, value, pattern))
    if not errors and all(_matches_empty(m) for m in matchers):
        # Alertmanager refuses these too: they would silence every alert there is.
        errors.append("at least one matcher must not match an empty label (it would mute all)")
    return matchers, errors


def _matches_empty(matcher: Matcher) -> bool:
    return matcher.matches({})


def silence_errors(
    raw: Any, starts_at: dt.datetime | None, ends_at: dt.datetime | None
) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    _, matcher_errors = parse_matchers(raw)
    if matcher_errors:
        errors["matchers"] = matcher_errors
    if starts_at is not None and ends_at is not None and ends_at <= starts_at:
        errors["ends_at"] = ["a silence must end after it starts"]
    return errors


def matchers_text(raw: Any) -> str:
    matchers, _ = parse_matchers(raw)
    return ", ".join(f'{m.label}{m.op}"{m.value}"' for m in matchers) or "(no matchers)"


@dataclass(frozen=True, slots=True)
class Mutes:
    """The silences and maintenance windows in force at one moment, read once."""

    silences: tuple[tuple[int, tuple[Matcher, ...]], ...] = ()
    sites: frozenset[int] = frozenset()
    racks: frozenset[int] = frozenset()
    nodes: frozenset[int] = frozenset()
    loops: frozenset[int] = frozenset()

    @classmethod
    def at(cls, now: dt.datetime) -> Mutes:
        from fleet.alerts.models import MaintenanceWindow, Silence

        silences = []
        for pk, raw in Silence.objects.filter(starts_at__lte=now, ends_at__gt=now).values_list(
            "pk", "matchers"
        ):
            matchers, errors = parse_matchers(raw)
            if matchers and not errors:
                silences.append((pk, tuple(matchers)))
        windows = MaintenanceWindow.objects.filter(starts_at__lte=now, ends_at__gt=now)
        rows = list(windows.values_list("site_id", "rack_id", "node_id", "loop_id"))
        return cls(
            silences=tuple(silences),
            sites=frozenset(s for s, _, _, _ in rows if s is not None),
            racks=frozenset(r for _, r, _, _ in rows if r is not None),
            nodes=frozenset(n for _, _, n, _ in rows if n is not None),
            loops=frozenset(lp for _, _, _, lp in rows if lp is not None),
        )

    def reason(
        self,
        labels: dict[str, Any],
        site_id: int | None,
        rack_id: int | None,
        node_id: int | None,
        loop_id: int | None = None,
    ) -> str:
        """Why this alert is muted now ("" when it is not). `loop_id`: the loop itself, or
        the loop that cools the alert's rack."""
        if node_id is not None and node_id in self.nodes:
            return "node in maintenance"
        if rack_id is not None and rack_id in self.racks:
            return "rack in maintenance"
        if loop_id is not None and loop_id in self.loops:
            return "cooling loop in maintenance"
        if site_id is not None and site_id in self.sites:
            return "site in maintenance"
        for pk, matchers in self.silences:
            if all(m.matches(labels) for m in matchers):
                return f"silence {pk}"
        return ""
