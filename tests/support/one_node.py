"""One demo node with 8 GPUs and an ingest pipeline it has said hello to, on the default
database: the tests that send it batches (workload intervals, fabric ports) and read what the
pipeline stored. Modules name the fixtures: `node = one_node.node`,
`pipeline = one_node.pipeline`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.ingest.pipeline import IngestPipeline
from fleet.models import Node
from tests.support.latest import DjangoSqliteDb

NODE = "gpu-a01-01"


@pytest.fixture
def node() -> Node:
    seed_demo_site("demo", (replace(DEMO_RACKS[0], nodes=1),), gpus_per_node=8)
    return Node.objects.get(name=NODE)


@pytest.fixture
def pipeline(node: Node) -> Iterator[IngestPipeline]:
    pipeline = IngestPipeline(DjangoSqliteDb(), save_interval_s=3600.0)
    pipeline.hello(1, f"node:{NODE}", node.rack.hall.site_id, "hash")
    yield pipeline
