"""How the long-lived processes on the ingest path set Python's cyclic garbage collector.

Measured (perf, a server process at 8,000 GPUs on the 2-core VM): with CPython's
defaults — a young collection every 700 new containers, and every tenth of those
older ones that walk the whole heap, Django's ~100,000 objects from start included —
the collector took about a tenth of a server's event loop and a twentieth of an ingest
child: every batch's answer, every CHANGED frame and every decoded sample allocates
containers, almost none of them in cycles.

`settle_gc` is called once a process has loaded what it keeps for life (the server
once its ASGI application is built, the ingest child once connected): it collects
once, moves every object alive then out of the collector's sight for good
(`gc.freeze`), and makes young collections rarer. Cycles are still collected, later and
in larger batches; memory held by them is bounded by the threshold.
"""

from __future__ import annotations

import gc

# New containers between young collections (CPython's default is 700). A round of the
# ingest path allocates thousands; at this size a young collection comes every few rounds
# instead of several times in one, and each still walks only the young objects.
YOUNG_THRESHOLD = 50_000
OLDER_THRESHOLDS = (20, 20)


def settle_gc() -> None:
    """Collect once, freeze what is alive now, and space out later collections."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
