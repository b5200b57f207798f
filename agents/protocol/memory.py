"""A GPU's memory-error facts that change rarely, and the events of its resets.

`gpu_info[].memory_errors` (docs/protocol.md): the lifetime ECC counts NVML keeps in the
InfoROM and the pre-Ampere page-retirement counts. They change a few times in a GPU's life,
so they are not per-second metrics: the agent reads them on its slow lane and sends
`gpu_info` again when one changes. Each key is a count (an integer ≥ 0), or
`NOT_SUPPORTED` where NVML answered that this GPU does not have it (an H100/H200 has no page
retirement: row remapping replaced it). A key left out was not read (an older agent, or a
read that failed): the pages say "not reported", never 0.

`RESET_EVENTS`: the event kinds of a GPU reset and of a driver reload that the agent saw
itself (agents/collectors/gpu_resets.py).
"""

from __future__ import annotations

from typing import Any

MEMORY_ERRORS_KEY = "memory_errors"
NOT_SUPPORTED = "not_supported"

# key -> what it counts (NVML field id in the comment)
MEMORY_ERROR_KEYS: dict[str, str] = {
    "ecc_sbe_agg_total": "single-bit ECC errors in the GPU's life",  # 5, ECC_SBE_AGG_TOTAL
    "ecc_dbe_agg_total": "double-bit ECC errors in the GPU's life",  # 6, ECC_DBE_AGG_TOTAL
    "retired_pages_sbe": "pages retired for repeated single-bit errors",  # 29, RETIRED_SBE
    "retired_pages_dbe": "pages retired for a double-bit error",  # 30, RETIRED_DBE
    "retired_pages_pending": "1 while a page waits for the next driver load",  # 31
}

GPU_RESET = "gpu_reset"
DRIVER_RELOAD = "driver_reload"
RESET_EVENTS = (GPU_RESET, DRIVER_RELOAD)

MAX_COUNT = 2**63 - 1


def memory_error_problem(block: Any) -> tuple[str, str] | None:
    """(the key at fault, why) when `block` is not a valid `memory_errors`, else None."""
    if type(block) is not dict:
        return "", "must be an object"
    for key, value in block.items():
        if key not in MEMORY_ERROR_KEYS:
            return key, f"unknown key; known: {', '.join(MEMORY_ERROR_KEYS)}"
        if value == NOT_SUPPORTED:
            continue
        if type(value) is not int or not 0 <= value <= MAX_COUNT:
            return key, f"must be a count (an integer >= 0) or {NOT_SUPPORTED!r}"
    return None
