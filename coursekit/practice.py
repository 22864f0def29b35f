"""Practice the hidden checks' *kinds* on your own inputs, untimed: graphs, recompiles, host/device traffic.

The grader's hidden structure checks run your code on inputs you do not see and count three things. This counts
the same three on inputs you choose, in your own kernel, so that you can find a structural mistake before you
submit::

    from coursekit.practice import practice
    practice(my_loss, [(logits, target), (logits2, target2)])

* **graphs and breaks**: ``torch._dynamo.explain`` on the first inputs, with each break's reason in plain words;
* **compiles**: ``fn`` compiled with a counting backend (``aot_eager`` by default: Dynamo's count, no code
  generation) and called on every input in turn; a count that grows is a recompile. Where your exercise asks you
  to write the compile itself (its options decide the recompiles), pass it: ``compile_with=compile_tagger``, any
  ``compile_with(fn, backend)`` that returns ``fn`` compiled with that backend;
* **traffic**: ``coursekit.traffic.watch_traffic`` around a call of ``fn`` as it is, *not* compiled, after one
  warm-up call (as the hidden traffic checks watch it): device-to-host syncs and host-built tensors. Compiling can
  hide them on a CPU (Dynamo folds a host-built constant into the graph), but not the eager code you wrote.

Nothing is timed and nothing is graded: the report says what the hidden checks of each kind require, and your
numbers. Recompiles depend on the inputs: try shapes and values like the ones your exercise describes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from coursekit.explain import explain_counts
from coursekit.traffic import host_copies, sync_waits, told, watch_traffic


@dataclass
class PracticeReport:
    """What ``practice`` counted. ``frames[i]`` is the compile count after the ``i``-th input."""

    graphs: int
    breaks: int
    reasons: list[str]
    frames: list[int]
    syncs: dict[str, int] = field(default_factory=dict)
    host_tensors: dict[str, int] = field(default_factory=dict)
    device: str = "cpu"  # where the traffic was watched: it decides which events are waits (``sync_waits``)

    @property
    def recompiles(self) -> int:
        return max(self.frames[-1] - self.frames[0], 0) if self.frames else 0

    def lines(self) -> list[str]:
        """The report as text: each count beside what the hidden checks of that kind usually ask for (your
        exercise's task says where it allows more, e.g. a bounded number of compiles over a stream of shapes)."""

        return [
            f"graphs: {self.graphs}, breaks: {self.breaks}    (usually asked: 1 graph, no break)",
            *(f"  break: {r}" for r in self.reasons),
            f"graphs compiled so far, after each call: {self.frames}    (a count that grows is a recompile; usually "
            "asked: no growth once each shape has been seen)",
            f"device->host syncs: {told(sync_waits(self.syncs, self.device), self.syncs)}    "
            "(where a check counts them, it asks: none)",
            f"host-built tensors: {told(host_copies(self.host_tensors), self.host_tensors)}    "
            "(where a check counts them, it asks: none)",
        ]

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def __repr__(self) -> str:
        """One line: ``practice`` has printed the report already, and a notebook shows what a cell's last line
        returns (blind learner, session 38: the whole report twice)."""
        syncs, host = sync_waits(self.syncs, self.device), host_copies(self.host_tensors)
        return (
            f"PracticeReport(graphs={self.graphs}, breaks={self.breaks}, recompiles={self.recompiles}, "
            f"syncs={syncs}, host_built_tensors={host})"
        )


def _as_args(inputs: object) -> tuple:
    return inputs if isinstance(inputs, tuple) else (inputs,)


def _run(fn: Callable, args: tuple, backward: bool) -> None:
    out = fn(*args)
    if backward:
        (out if out.dim() == 0 else out.sum()).backward()


def practice(
    fn: Callable,
    inputs: Sequence[object],
    *,
    backend: str = "aot_eager",
    device: str | torch.device | None = None,
    allow_inside: tuple[str, ...] = (),
    backward: bool = False,
    compile_with: Callable[[Callable, Callable], Callable] | None = None,
    show: bool = True,
) -> PracticeReport:
    """Count graphs and breaks, compiles over ``inputs`` and the traffic of one eager call; print the report when
    ``show``. Each item of ``inputs`` is one call's arguments (a tuple, or a single tensor). ``backward`` also
    runs backward on each call's (summed) output, for a loss. ``allow_inside`` is passed to ``watch_traffic`` (a
    custom op's own host work, e.g. ``("ex02::",)``). ``compile_with(fn, backend)`` compiles ``fn`` for the
    compile count, where the options are yours to choose (default: ``torch.compile(fn, backend=backend)``, whose
    automatic dynamic shapes recompile once on a second shape)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    if not inputs:
        raise ValueError("practice needs at least one input: a list of argument tuples")
    calls = [_as_args(i) for i in inputs]
    torch.compiler.reset()
    explained = explain_counts(fn, *calls[0])
    torch.compiler.reset()
    counter = CompileCounterWithBackend(backend)
    compiled = compile_with(fn, counter) if compile_with else torch.compile(fn, backend=counter)
    frames = []
    for args in calls:
        _run(compiled, args, backward)
        frames.append(counter.frame_count)
    torch.compiler.reset()
    if device is None:
        tensors = [a for a in calls[-1] if isinstance(a, torch.Tensor)]
        device = tensors[0].device if tensors else "cpu"
    _run(fn, calls[-1], backward)  # lazy set-up on a first call is allowed, as in the hidden checks
    with watch_traffic(device, allow_inside=allow_inside) as traffic:
        _run(fn, calls[-1], backward)
    report = PracticeReport(
        explained["graphs"],
        explained["breaks"],
        explained["reasons"],
        frames,
        dict(traffic.syncs.most_common()),
        dict(traffic.host_tensors.most_common()),
        str(device),
    )
    if show:
        print(report)
    return report
