"""The worker's garbage collector settings, once its modules and Faust app are built."""

from __future__ import annotations

import gc

GC_YOUNG_THRESHOLD = 10_000
_HEAP_FROZEN = False


def freeze_startup_heap() -> None:
    """Keep the objects alive once the app is built (modules, the Faust app: ~120,000) out of
    every later collection: ``gc.collect()``, then ``gc.freeze()``. A full collection used to
    traverse them all again (throughput bench: 9 of them, 0.46 s of the worker's 9 s CPU, 52 ms
    each). Then a young generation of GC_YOUNG_THRESHOLD objects instead of 700: a batch
    allocates a few containers per record (drafts, lists, tuples, Faust's events), most of
    them garbage by the end of the batch, and collecting every 700 allocations promoted and
    re-scanned them (ingest micro-benchmark: 8 % of its time). Once per process; only cyclic
    garbage among the frozen objects would stay (they live as long as the process). Before
    the agents start: their coroutines stay visible to ``gc.get_objects()``
    (stream_app/faust_adapter/diagnostics.py lists them)."""
    global _HEAP_FROZEN
    if not _HEAP_FROZEN:
        _HEAP_FROZEN = True
        gc.collect()
        gc.freeze()
        gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])

