"""How much memory one call needs at its peak, measured on the device it runs on.

:func:`peak_bytes` answers "how far above what was already allocated did this call go?". On a CUDA device that is
the caching allocator's own statistic (``torch.cuda.reset_peak_memory_stats`` / ``max_memory_allocated``). A CPU
has no such counter, so the call runs under ``torch.profiler`` with ``profile_memory=True``, which records every
allocation and free the c10 CPU allocator makes (eager ops and Inductor's compiled kernels alike), and the peak
is the highest running total of those records. The public ``profiler.events()`` folds allocations into the op
that made them, so the records are read from the profiler's event tree (``torch._C._profiler``, the same source
``torch.profiler``'s memory timeline reads), which has held these fields since torch 2.0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from coursekit.timing import synchronize

MIB = 2**20


def peak_bytes(fn: Callable[[], Any], device: str) -> int:
    """Bytes allocated at the peak of ``fn()`` above what was allocated when it started (its output included)."""
    if torch.device(device).type == "cuda":
        synchronize(device)
        start = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - start
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return _highest_running_total(prof)


def _highest_running_total(prof: profile) -> int:
    from torch._C._profiler import _EventType

    def walk(events: list) -> Iterator:
        for event in events:
            yield event
            yield from walk(event.children)

    tree = prof.profiler.kineto_results.experimental_event_tree()
    records = sorted((e.start_time_ns, e.extra_fields.alloc_size) for e in walk(tree) if e.tag == _EventType.Allocation)
    total = peak = 0
    for _, size in records:  # size < 0 for a free
        total += size
        peak = max(peak, total)
    return peak
