"""Detect host<->device traffic: the hidden costs of lesson 1.

Two kinds of event stall an accelerator from the host side:

* **device-to-host syncs**: reading tensor data on the host (``.item()``,
  ``bool(t)`` in an ``assert``/``if``, ``.tolist()``, ``.numpy()``, boolean-mask
  indexing whose result size depends on the data).  The host
  waits for the device to finish everything queued before it.
* **host-built tensors**: tensors made from Python data inside the step
  (``torch.tensor([...])``, ``torch.Tensor(list)``, indexing with a Python
  ``range`` or list).  On a GPU each one is a host-to-device copy.

On CPU neither costs a copy, but both show up in the profiler
(``aten::_local_scalar_dense`` and ``aten::lift_fresh``), so the same check
runs on a laptop and on a GPU.  On CUDA the profiler's memcpy events and
``torch.cuda.set_sync_debug_mode`` warnings are listed too.

On CUDA one sync shows as several events at once: an ``.item()`` is an operator
(``aten::_local_scalar_dense``), a ``Memcpy DtoH`` on the device, a
``cudaStreamSynchronize`` runtime call and a sync-debug warning.  Every event is
listed by name as evidence; the number of syncs is counted once per wait
(``sync_waits``), and the number of host-built tensors once per tensor
(``host_copies``: ``aten::lift_fresh`` and ``Memcpy HtoD``).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

from coursekit.cache import inductor_cache_dir
from coursekit.versions import torch_before

os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # keep kineto chatter out of notebooks (5 lets USDT lines through)

# reads of device data on the host: .item() (_local_scalar_dense), and the operators whose result's size or value
# the host needs (a data-dependent shape, a Python bool), which on a CUDA device wait for it whatever the CPU does
SYNC_EVENTS = (
    "aten::_local_scalar_dense",
    "aten::nonzero",
    "aten::masked_select",
    "aten::_unique",
    "aten::_unique2",
    "aten::unique_dim",
    "aten::unique_consecutive",
    "aten::bincount",
    "aten::equal",
)
HOST_TENSOR_EVENTS = ("aten::lift_fresh",)
HOST_READ_METHODS = ("tolist", "numpy")
SYNC_WARNING = "cuda sync debug warning"


def _sync_view(name: str, cuda: bool) -> str | None:
    """Which kind of evidence of a host wait an event of ``Traffic.syncs`` is, for a watch on CUDA or not; ``None``
    for an event that counts no wait there."""
    if name == "cudaStreamSynchronize":
        return "runtime"
    if name == SYNC_WARNING:
        return "sync debug"
    if name.startswith("Memcpy DtoH"):
        # a copy into pageable memory waits inside cudaMemcpyAsync, even non_blocking (no runtime call, no warning);
        # one into pinned memory waits only where a runtime call shows it (.item()), or not at all (non_blocking)
        return "pageable copies" if "Pageable" in name else None
    return None if cuda else "reads"  # SYNC_EVENTS, HOST_READ_METHODS: on CUDA, a CPU tensor's read waits for nothing


def _largest_view(counts: Mapping[str, int], view: Callable[[str], str | None]) -> int:
    views: Counter = Counter()
    for name, n in counts.items():
        if (which := view(name)) is not None:
            views[which] += n
    return max(views.values(), default=0)


def sync_waits(syncs: Mapping[str, int], device: str | torch.device = "cpu") -> int:
    """How many times the host read device data (on a GPU, waited for it), from the events ``Traffic.syncs`` counted
    in a watch on ``device``.

    On CUDA a wait shows as a runtime call (``cudaStreamSynchronize``) and a sync-debug warning, or, for a copy into
    pageable memory, as that copy alone; the reading operator (``aten::_local_scalar_dense``) shows only some waits,
    and also reads of CPU tensors (an optimizer's step count), which wait for nothing. So on CUDA: the most of the
    first three kinds (lesson 1's rung 0 on the H200 listed 8 events for its 3 waits, lesson 2's broken step 11
    ``_local_scalar_dense`` for 7). On a CPU, where nothing waits, every read of tensor data counts."""
    cuda = torch.device(device).type == "cuda"
    return _largest_view(syncs, lambda name: _sync_view(name, cuda))


def host_copies(host_tensors: Mapping[str, int]) -> int:
    """How many tensors were built on the host and copied to the device, from the events ``Traffic.host_tensors``
    counts: on CUDA one shows as ``aten::lift_fresh`` (made from Python data) and as a ``Memcpy HtoD``, a CPU tensor
    moved to the device as the copy only, and on a CPU the copy never happens. So: the larger view."""
    return _largest_view(host_tensors, lambda name: "device copies" if name.startswith("Memcpy HtoD") else "operators")


def _listed(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} x{v}" for k, v in Counter(counts).most_common()) or "none"


def told(count: int, events: Mapping[str, int]) -> str:
    """``count`` with the events it was counted from, e.g. ``3 (events: cudaStreamSynchronize x3, ...)``."""
    return f"{count} (events: {_listed(events)})" if events else "none"


@dataclass
class Traffic:
    """Counts of host/device traffic seen while the watched code ran."""

    syncs: Counter = field(default_factory=Counter)
    host_tensors: Counter = field(default_factory=Counter)
    sync_sites: Counter = field(default_factory=Counter)  # where each CUDA sync-debug warning was raised
    device: str = "cpu"  # the watched device, which decides what counts as a wait

    @property
    def sync_count(self) -> int:
        """How many syncs (``sync_waits``): not the number of events, which on CUDA list each sync several times."""
        return sync_waits(self.syncs, self.device)

    @property
    def host_tensor_count(self) -> int:
        """How many host-built tensors (``host_copies``): not the number of events."""
        return host_copies(self.host_tensors)

    def summary(self) -> str:
        """A short, readable account, e.g. for a notebook or a failing check."""
        sites = f" (sync-debug warnings raised at {_listed(self.sync_sites)})" if self.sync_sites else ""
        return (
            f"device->host syncs: {told(self.sync_count, self.syncs)}; "
            f"host-built tensors / H2D copies: {told(self.host_tensor_count, self.host_tensors)}" + sites
        )


class _HostReads(TorchFunctionMode):
    """Counts whole-tensor reads to the host, which the CPU profiler does not show."""

    def __init__(self, counts: Counter) -> None:
        super().__init__()
        self.counts = counts

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in HOST_READ_METHODS:
            self.counts[f"Tensor.{name}"] += 1
        return func(*args, **(kwargs or {}))


def _inside(event, prefixes: tuple[str, ...]) -> bool:
    """True if ``event`` runs inside an op whose name starts with one of ``prefixes``."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(prefixes):
            return True
        parent = parent.cpu_parent
    return False


def _launcher(event, ops: dict) -> object | None:
    """The op that launched a device event (a memcpy) or a runtime call, found by the correlation id the profiler
    links it to; ``None`` for an op itself."""
    linked = getattr(event, "linked_correlation_id", 0) or 0
    return ops.get(linked) if linked > 0 else None


def _allowed(event, prefixes: tuple[str, ...], ops: dict) -> bool:
    """True if ``event`` runs inside an allowed op, or was launched by one (a custom op's own copies and syncs)."""
    if _inside(event, prefixes):
        return True
    op = _launcher(event, ops)
    return op is not None and _is_or_inside(op, prefixes)


def _is_or_inside(op, prefixes: tuple[str, ...]) -> bool:
    return op.name.startswith(prefixes) or _inside(op, prefixes)


def _launched_by_allowed_ops(events: list, prefixes: tuple[str, ...]) -> Counter:
    """Device events (copies) that allowed ops launched, by name, from each op's ``kernels``: torch lists there the
    device events linked to the op. Torch 2.11's events do not expose that link themselves (no
    ``linked_correlation_id``; the H200 run counted lesson 2's custom-op copies), so there a device copy is matched by
    name against this budget."""
    launched: Counter = Counter()
    for op in events:
        kernels = getattr(op, "kernels", None)
        if kernels and _is_or_inside(op, prefixes):
            launched.update(k.name for k in kernels)
    return launched


def _count_profile(prof: torch.profiler.profile, traffic: Traffic, allow_inside: tuple[str, ...] = ()) -> None:
    events = list(prof.events())
    ops = {e.id: e for e in events if not (getattr(e, "linked_correlation_id", 0) or 0)}  # the ops, by correlation id
    launched = _launched_by_allowed_ops(events, allow_inside) if allow_inside else Counter()
    for event in events:
        name = event.name
        if allow_inside and _allowed(event, allow_inside, ops):
            continue
        if launched[name] and not hasattr(event, "linked_correlation_id"):  # an allowed op's copy, by its kernels
            launched[name] -= 1
            continue
        if name in SYNC_EVENTS:
            if not _inside(event, SYNC_EVENTS):  # one host read each: a nonzero inside masked_select is the same
                traffic.syncs[name] += 1
        elif name == "cudaStreamSynchronize" or name.startswith("Memcpy DtoH"):
            traffic.syncs[name] += 1
        elif name in HOST_TENSOR_EVENTS or name.startswith("Memcpy HtoD"):
            traffic.host_tensors[name] += 1


def host_reads_under_compile() -> bool:
    """Whether compiled code that traces NumPy can run under the TorchFunctionMode counting ``.tolist()`` and
    ``.numpy()``: on torch 2.11 Dynamo fails inside it ("'ndarray' object has no attribute 'dim'", a loop over
    ``np.arange``), on 2.14 it works. Versions in between are untested and treated like 2.11."""
    return not torch_before(2, 14)


_profiler_warmed: set[str] = set()
_open_watches = [0]  # how many watch_traffic blocks are open now (the grader's probes read it; not an API)


def _warm_profiler(activities: list, device: torch.device) -> None:
    """Run one throw-away watched session per process and device before the first counted one, under the same
    conditions (sync debug mode, the host-read mode, a kernel and a copy to the host): on the first H100 run
    (torch 2.11) every probe that watched a single call reported one sync that the lesson's second watched call
    of the same code did not, and on the H200 run (torch 2.11) warming the profiler alone, outside sync debug
    mode, did not remove it. Its warnings are dropped."""
    key = f"{device}:" + ",".join(sorted(str(a) for a in activities))
    if key in _profiler_warmed:
        return
    old_mode = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with torch.profiler.profile(activities=activities), _HostReads(Counter()):
                (torch.ones(8, device=device) * 2).sum().cpu()
                torch.cuda.synchronize(device)
        finally:
            torch.cuda.set_sync_debug_mode(old_mode)
    _profiler_warmed.add(key)


def _in_allowed_op(prefixes: tuple[str, ...]) -> bool:
    """True if the running Python code was called by a ``torch.library.custom_op`` whose name starts with one of
    ``prefixes``: its implementation runs under the ``CustomOpDef`` that torch keeps in the caller's frame (eager and
    compiled code alike, torch 2.11 and 2.14). A sync-debug warning raised there is the op's known price."""
    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, torch.library.CustomOpDef) and getattr(owner, "_qualname", "").startswith(prefixes):
            return True
        frame = frame.f_back
    return False


_NOT_THE_RAISER = (__file__, warnings.__file__, os.path.dirname(torch.__file__) + os.sep)


def _raiser() -> str | None:
    """``folder/file.py:line`` of the innermost frame outside torch, ``warnings`` and this file: the code that made
    torch's C++ raise a warning. Such a warning names the innermost Python frame (on the H200 run, this file's
    ``_HostReads`` for every sync); the lesson's or learner's line below it is what the reader can change."""
    frame = sys._getframe(1)
    while frame is not None:
        if not frame.f_code.co_filename.startswith(_NOT_THE_RAISER):
            return _short(frame.f_code.co_filename, frame.f_lineno)
        frame = frame.f_back
    return None


def _short(filename: str, lineno: int) -> str:
    """``folder/file.py:line``: short enough for a message, enough to find the line. A module Inductor generated
    (its cache folder's ``xx/c<hash>.py``) reads ``Inductor output code c<hash…>:line``: the compiled graph itself
    does the read, and ``TORCH_LOGS=output_code`` or ``tlparse`` shows that code."""
    path = os.path.abspath(filename)
    if path.startswith(inductor_cache_dir() + os.sep):
        return f"Inductor output code {Path(path).stem[:9]}…:{lineno}"
    parts = str(filename).replace("\\", "/").split("/")
    return f"{'/'.join(parts[-2:])}:{lineno}"


@contextmanager
def watch_traffic(
    device: str | torch.device = "cpu", allow_inside: tuple[str, ...] = (), host_reads: bool = True
) -> Iterator[Traffic]:
    """Count syncs and host-built tensors in the ``with`` block; read the result after it.

    ``allow_inside`` names op prefixes (e.g. ``("mylib::",)`` for a custom op
    that wraps a host library) whose internal traffic is the op's known price
    and is not counted.

    ``host_reads=False`` leaves out the TorchFunctionMode that counts
    ``.tolist()``/``.numpy()`` (profiler events still count ``.item()``).  A
    compiled function guards on that mode, so its first watched call
    recompiles; and torch 2.14 cannot run compiled code whose captured
    ``.item()`` leaves the graph (``capture_scalar_outputs``) under any mode.
    """
    traffic = Traffic(device=str(device))
    cuda = torch.device(device).type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    if cuda:
        _warm_profiler(activities, torch.device(device))
    old_mode = torch.cuda.get_sync_debug_mode() if cuda else 0
    caught: list[tuple[warnings.WarningMessage, bool, str | None]] = []  # each warning, raised in an allowed op?, by

    @torch.compiler.disable  # called in a compiled function's eager stretches: Dynamo must not trace the stack walk
    def record(message, category, filename, lineno, file=None, line=None) -> None:
        own = bool(allow_inside) and _in_allowed_op(allow_inside)
        caught.append((warnings.WarningMessage(message, category, filename, lineno, file, line), own, _raiser()))

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        if cuda:
            torch.cuda.set_sync_debug_mode("warn")
        try:
            reads = _HostReads(traffic.syncs) if host_reads else nullcontext()
            with torch.profiler.profile(activities=activities) as prof, reads:
                _open_watches[0] += 1
                try:
                    yield traffic
                finally:
                    _open_watches[0] = max(0, _open_watches[0] - 1)
                if cuda:  # the watch's own wait for the device's last kernels is not the code's sync
                    torch.cuda.set_sync_debug_mode(0)
                    torch.cuda.synchronize(device)
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode(old_mode)
    _count_profile(prof, traffic, allow_inside)
    for w, own, raiser in caught:
        if "synchronizing" in str(w.message):
            if own:
                continue
            traffic.syncs[SYNC_WARNING] += 1
            traffic.sync_sites[raiser or _short(w.filename, w.lineno)] += 1
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
