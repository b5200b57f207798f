"""The oldest node agent this server supports, and how a node's agent stands against it.

An agent reports its version once per start in `node_info.agent_version` (agents/runner.py;
kept in `Node.info` by fleet/ingest/resolve.py). Versions compare as PEP 440 versions
(`packaging.version`): 0.10.0 is newer than 0.9.1, 1.0.0rc1 older than 1.0.0. What an agent
sent that is no such version (or is too long to be one) is judged "unknown", never refused.

The protocol: the server accepts batches of `PROTOCOL_VERSION` only (agents/protocol/
validate.py refuses any other), so a node the server has accepted a batch from speaks it;
nothing per batch is stored for that. Once the server accepts more than one protocol, the
ingest must keep each node's own.

The node page, the admin's node list and /metrics read their words and judgement here.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from agents.protocol import PROTOCOL_VERSION

# Raise with a release that drops support for older agents (docs/agent.md, "Upgrading").
OLDEST_SUPPORTED_AGENT = "0.1.0"
AGENT_PACKAGE = "fleetwatch-agent"
# Longer than any version an agent sends: shown cut, judged unknown (and never a label).
MAX_VERSION_CHARS = 64
NOT_REPORTED = "not reported"


class Support(enum.StrEnum):
    CURRENT = "current"  # the oldest supported or newer
    OUTDATED = "outdated"  # older than OLDEST_SUPPORTED_AGENT: upgrade it
    UNKNOWN = "unknown"  # not reported, or not a version that compares


@dataclass(frozen=True)
class AgentSupport:
    support: Support
    reported: str | None  # what the agent sent, cut to MAX_VERSION_CHARS; None: nothing
    version: str | None  # its normalised PEP 440 form; None when unknown

    @property
    def outdated(self) -> bool:
        return self.support is Support.OUTDATED

    def words(self) -> str:
        """The version as people read it: '0.1.0', 'not reported', or what was sent and
        why it is not judged."""
        if self.reported is None:
            return NOT_REPORTED
        if self.version is None:
            return f"“{self.reported}” (not a version number: not compared)"
        return self.reported

    def in_a_list(self) -> str:
        """One cell of a list of nodes: the version, and 'outdated' in words when it is."""
        if not self.outdated:
            return self.words()
        return f"{self.reported} — outdated: older than {OLDEST_SUPPORTED_AGENT}, upgrade it"

    def flag(self) -> str | None:
        """The words that say this agent must be upgraded; None when it need not be."""
        if not self.outdated:
            return None
        return (
            f"agent {self.reported} is older than {OLDEST_SUPPORTED_AGENT}, the oldest this"
            f" server supports — upgrade {AGENT_PACKAGE}"
        )


def agent_support(version: str | None) -> AgentSupport:
    """How a reported agent version stands against OLDEST_SUPPORTED_AGENT."""
    reported = "" if version is None else str(version).strip()
    if not reported:
        return AgentSupport(Support.UNKNOWN, None, None)
    if len(reported) > MAX_VERSION_CHARS:
        return AgentSupport(Support.UNKNOWN, reported[:MAX_VERSION_CHARS] + "…", None)
    return _judged(reported)


@functools.lru_cache(maxsize=256)  # a fleet runs a few versions: /metrics parses each once
def _judged(reported: str) -> AgentSupport:
    try:
        parsed = Version(reported)
    except InvalidVersion:
        return AgentSupport(Support.UNKNOWN, reported, None)
    support = Support.OUTDATED if parsed < _OLDEST else Support.CURRENT
    return AgentSupport(support, reported, str(parsed))


def node_agent_support(info: Any) -> AgentSupport:
    """The judgement of a node's stored `info`."""
    return reported_support(info.get("agent_version") if isinstance(info, dict) else None)


def reported_support(value: Any) -> AgentSupport:
    """The judgement of whatever JSON an agent sent as its version (a number, a list...)."""
    if value is None or isinstance(value, dict | list | bool):
        return agent_support(None)
    return agent_support(str(value))


def speaks_protocol(support: AgentSupport, batch_seen: bool) -> bool:
    """Whether the server has accepted a batch of the node's (all carry PROTOCOL_VERSION):
    its token has a last batch, or its agent reported a version (node_info rides only in
    accepted batches)."""
    return batch_seen or support.reported is not None


def protocol_label(support: AgentSupport, batch_seen: bool) -> str:
    """The protocol as a metric label: its number, or 'none' (no batch accepted yet)."""
    return str(PROTOCOL_VERSION) if speaks_protocol(support, batch_seen) else "none"


def agent_line(support: AgentSupport, batch_seen: bool) -> str:
    """'Agent 0.1.0 · protocol v1' (the node page's first line of its agent panel)."""
    version = support.words()
    lead = f"Agent {version}" if support.version is not None else f"Agent version {version}"
    protocol = (
        f"protocol v{PROTOCOL_VERSION}"
        if speaks_protocol(support, batch_seen)
        else "no batch accepted yet"
    )
    return f"{lead} · {protocol}"


_OLDEST = Version(OLDEST_SUPPORTED_AGENT)
