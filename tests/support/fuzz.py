"""Hypothesis strategies and profiles for the fuzz tests (issue 11).

`make test` runs the short `ci` profile; `HYPOTHESIS_PROFILE=long .venv/bin/pytest -q
tests/protocol/test_fuzz.py tests/fleet/test_fuzz.py` runs many more examples on demand.
No example database is written (the suite leaves no files in the tree).
"""

from __future__ import annotations

import os
import time
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from agents.protocol.metrics import METRICS, SAMPLE_KINDS

settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "long",
    max_examples=1000,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Any JSON value, including integers beyond 64 bits and text with NUL characters.
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=16,
)

TOP_KEYS = ["protocol", "source", "seq", "sent_at", "gpu_info", "node_info", "events", "agent"]
FIELDS = sorted({m.name for ms in METRICS.values() for m in ms} | {"ts", "gpu", "rack", "feed"})


def good_batch(node: str, seq: int, gpus: int = 4) -> dict[str, Any]:
    ts = round(time.time() - 1, 3)
    samples = [{"ts": ts, "gpu": i, "power_w": 300.5, "temp_gpu_c": 60} for i in range(gpus)]
    return {"protocol": 1, "source": f"node:{node}", "seq": seq, "gpu": samples}


@st.composite
def batches(draw: st.DrawFn, node: str = "n1") -> Any:
    """Near-valid batches with one thing spoiled, or anything at all."""
    shape = draw(st.sampled_from(["top", "sample", "extra", "kind", "anything"]))
    batch = good_batch(node, draw(st.integers(min_value=0, max_value=2**40)))
    if shape == "top":
        batch[draw(st.sampled_from(TOP_KEYS))] = draw(json_values)
    elif shape == "sample":
        sample = batch["gpu"][draw(st.integers(min_value=0, max_value=3))]
        sample[draw(st.sampled_from(FIELDS))] = draw(scalars)
    elif shape == "extra":
        batch[draw(st.text(max_size=10))] = draw(json_values)
    elif shape == "kind":
        kind = draw(st.sampled_from(SAMPLE_KINDS))
        batch[kind] = draw(st.lists(st.dictionaries(st.sampled_from(FIELDS), scalars), max_size=3))
    else:
        return draw(json_values)
    return batch
