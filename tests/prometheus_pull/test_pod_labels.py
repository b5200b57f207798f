"""Pulled dcgm-exporter series name the pod holding each GPU: a pull makes each node's
workloads snapshot from them (fleet/ingest/prometheus/pull_pods.py). In-process, from a
recorded answer of a real Prometheus to the pull's pod query (tests/data/dcgm-exporter)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from fleet.ingest.prometheus import pull_query
from fleet.ingest.prometheus.pull import Builder, pull_source
from fleet.ingest.prometheus.pull_match import GpuRef, Matcher
from fleet.ingest.prometheus.pull_pods import POD_LABELS
from fleet.ingest.prometheus.pull_query import pod_query
from fleet.models import GPU, GpuAllocation, Hall, Node, PrometheusSource, Rack, Site
from fleet.storage.workloads import EXPORTER, Snapshot

RECORDED = json.loads(
    (
        Path(__file__).resolve().parents[1] / "data" / "dcgm-exporter" / "pod-query-answer.json"
    ).read_text()
)
SCRAPED = float(RECORDED["result"][0]["value"][0])  # every target's scrape time in it
NODES = {"gpu-a01-01": 4, "gpu-a01-02": 2}  # node → GPUs, UUIDs GPU-a0101-0 …
NODE_IDS = {"gpu-a01-01": 1, "gpu-a01-02": 2}


def _answer() -> list[dict[str, Any]]:
    return copy.deepcopy(RECORDED["result"])


def _matcher(agent_nodes: frozenset[int] = frozenset()) -> Matcher:
    matcher = Matcher(("Hostname",), {}, site_id=7, agent_nodes=set(agent_nodes))
    for name, gpus in NODES.items():
        for index in range(gpus):
            uuid = f"GPU-a010{name[-1]}-{index}"
            matcher.by_uuid[uuid] = GpuRef(100 * NODE_IDS[name] + index, NODE_IDS[name], index)
    return matcher


def _snapshots(answer: list[dict[str, Any]], matcher: Matcher | None = None) -> list[Snapshot]:
    builder = Builder(matcher or _matcher(), {})
    for series in answer:
        builder.add_pods(series["metric"], (series["value"],))
    return builder.finish().write.workloads


def _allocations(snapshots: list[Snapshot]) -> dict[tuple[int, int], tuple[str, str]]:
    """(node, GPU) → (owner key, source) of every allocation the snapshots list."""
    return {
        (s.node_id, seen.gpu): (seen.owner[1], seen.source) for s in snapshots for seen in s.seen
    }


def test_the_recorded_answer_is_to_the_query_a_pull_asks() -> None:
    source = PrometheusSource(host_labels="Hostname", selector="")
    assert pod_query(source) == RECORDED["query"]


def test_a_gpu_whose_series_name_a_pod_is_allocated_to_it_by_the_exporter() -> None:
    snapshots = _snapshots(_answer())
    assert [(s.node_id, s.site_id, s.ts) for s in snapshots] == [(1, 7, SCRAPED), (2, 7, SCRAPED)]
    allocations = _allocations(snapshots)
    assert allocations[(1, 0)] == ("default/dcgmproftester2", EXPORTER)
    assert all(seen.pid is None for s in snapshots for seen in s.seen)  # no processes
    owners = snapshots[0].owners
    assert owners[("pod", "default/dcgmproftester2")]["container"] == "dcgmproftester2"


def test_gpus_with_empty_pod_labels_get_no_allocation_and_the_exporters_own_pod_is_none() -> None:
    """GPU 1 of gpu-a01-01 has empty labels (dcgm-exporter#277); GPU 1 of gpu-a01-02 shows
    only its scrape target's pod (the exporter's own): neither is listed, so neither is
    taken for unallocated nor for held by the exporter."""
    allocations = _allocations(_snapshots(_answer()))
    assert (1, 1) not in allocations
    assert (2, 1) not in allocations
    assert all("dcgm-exporter" not in key for key, _ in allocations.values())


def test_a_scrape_that_renamed_the_exporters_labels_gives_the_exported_pod() -> None:
    snapshots = _snapshots(_answer())
    assert _allocations(snapshots)[(2, 0)] == ("ml/trainer-0", EXPORTER)
    assert snapshots[1].owners[("pod", "ml/trainer-0")]["container"] == "train"


def test_a_time_shared_gpu_is_held_by_the_first_of_its_pods_by_name() -> None:
    assert _allocations(_snapshots(_answer()))[(1, 2)] == ("inference/infer-a", EXPORTER)


def test_a_gpu_split_into_mig_instances_is_left_out() -> None:
    assert (1, 3) not in _allocations(_snapshots(_answer()))


def test_a_node_whose_agent_reports_gets_no_snapshot_from_the_pull() -> None:
    snapshots = _snapshots(_answer(), _matcher(agent_nodes=frozenset({1})))
    assert [s.node_id for s in snapshots] == [2]


def test_a_node_none_of_whose_gpus_is_named_gets_no_snapshot() -> None:
    blank = [s for s in _answer() if s["metric"]["Hostname"] == "gpu-a01-01"]
    for series in blank:
        series["metric"] = {k: v for k, v in series["metric"].items() if k not in POD_LABELS}
    assert _snapshots(blank) == []


# -- through a pull, into intervals ----------------------------------------------------------


class RecordedPrometheus:
    """The pull's client, answering from the recording: both targets scraped at `scraped`,
    no field values (this file is about the pods), the pod query's recorded answer."""

    def __init__(self, source: PrometheusSource, answer: list[dict[str, Any]], scraped: float):
        self.pods = pod_query(source)
        self.answer = answer
        self.scraped = scraped

    def query_raw(self, query: str, at: float) -> list[dict[str, Any]]:
        if query == self.pods:
            return copy.deepcopy(self.answer)
        if query.startswith("max by (instance) (timestamp("):
            at_ = [self.scraped, str(self.scraped)]
            return [{"metric": {"instance": t}, "value": at_} for t in TARGETS]
        return []


TARGETS = ("10.0.3.17:9400", "10.0.3.18:9400")


@pytest.fixture
def source() -> PrometheusSource:
    site = Site.objects.create(slug="pods", name="Pods site")
    rack = Rack.objects.create(
        hall=Hall.objects.create(site=site, name="A"), name="A01", power_budget_kw=60
    )
    for position, (name, gpus) in enumerate(NODES.items()):
        node = Node.objects.create(name=name, rack=rack, position=position)
        for index in range(gpus):
            GPU.objects.create(node=node, index=index, uuid=f"GPU-a010{name[-1]}-{index}")
    return PrometheusSource.objects.create(
        name="pods", site=site, url="http://prometheus.invalid", host_labels="Hostname"
    )


def _pull(
    source: PrometheusSource,
    monkeypatch: pytest.MonkeyPatch,
    answer: list[dict[str, Any]],
    scraped: float,
) -> dict[str, Any]:
    """One pull at `scraped` + 2 s of a Prometheus whose targets were scraped at `scraped`."""
    for series in answer:
        series["value"][0] = scraped
    client = RecordedPrometheus(source, answer, scraped)
    monkeypatch.setattr(pull_query, "client_for", lambda _source: client)
    return pull_source(source, now=scraped + 2)


def _open() -> dict[tuple[str, int], str]:
    rows = GpuAllocation.objects.filter(ended__isnull=True, source=EXPORTER)
    return {(a.node.name, a.gpu): a.workload.key for a in rows.select_related("node", "workload")}


@pytest.mark.django_db
def test_a_pull_opens_intervals_for_named_gpus_and_ends_one_whose_pod_left(
    source: PrometheusSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = _pull(source, monkeypatch, _answer(), SCRAPED)
    assert summary["gpus_with_pod"] == 3
    assert _open() == {
        ("gpu-a01-01", 0): "default/dcgmproftester2",
        ("gpu-a01-01", 2): "inference/infer-a",
        ("gpu-a01-02", 0): "ml/trainer-0",
    }
    # A scrape later GPU 0's pod is gone from its labels; the node's GPU 2 still names its.
    later = [s for s in _answer() if s["metric"]["UUID"] != "GPU-a0101-0"]
    _pull(source, monkeypatch, later, SCRAPED + 30)
    assert set(_open()) == {("gpu-a01-01", 2), ("gpu-a01-02", 0)}
    ended = GpuAllocation.objects.get(gpu=0, node__name="gpu-a01-01")
    assert ended.ended == SCRAPED + 15  # midway between the pull that named it and this one


@pytest.mark.django_db
def test_labels_that_all_go_empty_leave_the_intervals_open_until_their_last_sight(
    source: PrometheusSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Empty labels are unknown, not unallocated: a pull naming no pod sends no snapshot."""
    _pull(source, monkeypatch, _answer(), SCRAPED)
    _pull(source, monkeypatch, [], SCRAPED + 30)
    rows = GpuAllocation.objects.filter(source=EXPORTER)
    assert rows.count() == 3
    assert all(a.ended is None and a.last_seen == SCRAPED for a in rows)
