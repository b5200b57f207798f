"""/metrics series of the node agents' versions (fleet/agent_versions.py judges them).

`fleetwatch_nodes_agent_outdated{site}` is what to alert on: nodes whose agent is older
than the oldest this server supports, 0 included, so `> 0` fires and resolves.
`fleetwatch_node_agent_info` says which nodes, and what each runs. Its labels stay bounded:
`version` is the normalised PEP 440 version or "unknown" (an agent's free text is never a
label), `protocol` the number or "none", `support` one of three words.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleet.agent_versions import Support, protocol_label, reported_support
from fleet.models import Node, SourceToken

if TYPE_CHECKING:
    from fleet.read.metrics.export import Families

INFO_LABELS = ("site", "rack", "node", "version", "protocol", "support")


def heard_nodes() -> set[str]:
    """Node sources the server has accepted a batch from (one query, not one per node)."""
    return set(
        SourceToken.objects.filter(kind="node", last_seen__isnull=False).values_list(
            "source", flat=True
        )
    )


def agent_series(f: Families, sites: dict[int, str]) -> None:
    outdated = f.gauge(
        "fleetwatch_nodes_agent_outdated",
        "nodes whose agent is older than the oldest this server supports: upgrade"
        ' fleetwatch-agent on them (fleetwatch_node_agent_info{support="outdated"})',
        ["site"],
    )
    info = f.gauge(
        "fleetwatch_node_agent_info",
        "each node's agent version (normalised, else unknown), the protocol its batches"
        " carry (none: none accepted yet) and its support (current, outdated, unknown); value 1",
        INFO_LABELS,
    )
    heard = heard_nodes()
    counts = dict.fromkeys(sites.values(), 0)
    rows = Node.objects.order_by("rack__hall__site_id", "rack__name", "name").values_list(
        "name", "rack__name", "rack__hall__site_id", "info__agent_version"
    )
    for name, rack, site_id, reported in rows.iterator(chunk_size=2000):
        site = sites.get(site_id, "")
        support = reported_support(reported)
        counts[site] = counts.get(site, 0) + support.outdated
        info.add_metric(
            [
                site,
                rack,
                name,
                support.version or Support.UNKNOWN.value,
                protocol_label(support, f"node:{name}" in heard),
                support.support.value,
            ],
            1.0,
        )
    for site, n in sorted(counts.items()):
        outdated.add_metric([site], float(n))
