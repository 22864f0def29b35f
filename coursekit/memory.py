"""What a lesson's training steps need in GPU memory at full size, estimated without a GPU.

A lesson's folder may hold ``sizes.py`` with ``cases(profile) -> list[Case]``: the models and inputs its notebook
and its exercise train. :func:`estimate` builds a case on the ``meta`` device (shapes, no data), runs one forward
and backward, which also catches shape errors at sizes CI never runs, and adds up the parameters, their
gradients, the optimizer's state and the activations autograd saves for the backward. That is a floor: the
allocator's cache, temporaries, cuDNN and cuBLAS workspaces and compiled kernels come on top, so
:func:`need_gib` adds :data:`HEADROOM`.

``python -m coursekit.memory`` prints every lesson's table; each manifest's ``full_memory_gib`` states the
largest need (``tests/test_full_size.py`` keeps it honest), and :func:`fits` is what a lesson's first cell prints.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from torch import nn

from coursekit.profile import Profile, get_profile

GIB = 2**30
HEADROOM = 1.3  # estimate x this: allocator cache, temporaries, workspaces (a rule of thumb, not a measurement)
Built = tuple[nn.Module, tuple, Callable[[object], torch.Tensor]]


@dataclass(frozen=True)
class Case:
    """One training step of a lesson: how to build its model and inputs for a profile, and its optimizer."""

    name: str
    build: Callable[[Profile], Built]  # (model, inputs, loss of the output)
    optimizer_slots: int = 2  # tensors of optimizer state per trainable parameter: Adam(W) 2, SGD momentum 1
    optimized: Callable[[nn.Module], list[nn.Parameter]] | None = None  # default: every parameter with a gradient


@dataclass(frozen=True)
class Estimate:
    """Bytes a training step holds at its peak, by kind."""

    name: str
    parameters: int
    gradients: int
    optimizer: int
    activations: int

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer + self.activations

    def describe(self) -> str:
        return (
            f"{self.name}: {self.total / GIB:.2f} GiB (parameters {self.parameters / GIB:.2f}, "
            f"gradients {self.gradients / GIB:.2f}, optimizer {self.optimizer / GIB:.2f}, "
            f"activations {self.activations / GIB:.2f})"
        )


def estimate(case: Case, profile: Profile) -> Estimate:
    """Build ``case`` for ``profile`` on the meta device, run one forward and backward, and count bytes."""
    meta = replace(profile, device="meta")
    with torch.device("meta"):  # parameters are made on the meta device: no memory, no initialisation cost
        model, inputs, loss = case.build(meta)
    params = list(model.parameters())
    param_ids = {id(p) for p in params}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        base = t._base if t._base is not None else t
        if id(base) not in param_ids:  # weights saved for the backward are counted as parameters
            saved[id(base)] = max(saved.get(id(base), 0), base.numel() * base.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = loss(model(*inputs))
    out.backward()
    trainable = [p for p in params if p.requires_grad]
    optimized = case.optimized(model) if case.optimized else trainable
    nbytes = lambda ps: sum(p.numel() * p.element_size() for p in ps)  # noqa: E731
    return Estimate(
        case.name, nbytes(params), nbytes(trainable), case.optimizer_slots * nbytes(optimized), sum(saved.values())
    )


def need_gib(estimates: list[Estimate]) -> float:
    """The GPU memory the largest case needs, with :data:`HEADROOM`, rounded up to a tenth of a GiB."""
    largest = max((e.total for e in estimates), default=0)
    return float(-(-largest * HEADROOM * 10 // GIB) / 10) if largest else 0.0


def free_gpu_bytes(profile: Profile) -> tuple[int, int]:
    """``(free, total)`` bytes of the profile's GPU, counting as free what this process's caching allocator holds
    but no tensor uses (``torch.cuda.mem_get_info`` is device-wide and counts that as used)."""
    device = torch.device(profile.device)
    free, total = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device), total


def fits(need: float, profile: Profile) -> str:
    """A line for a lesson's first cell: what it needs and what this GPU has free, or why that does not apply."""
    if not need:
        return "memory: this lesson's models are the same small ones on every profile (nothing to estimate)"
    if profile.device_class != "cuda":
        return f"memory: the {profile.name} profile on the CPU (the full profile needs a GPU with about {need:g} GiB)"
    free, total = free_gpu_bytes(profile)
    verdict = "fits" if free / GIB >= need else "DOES NOT FIT: expect out-of-memory errors in the largest steps"
    return f"memory: this lesson needs about {need:g} GiB; {free / GIB:.1f} of {total / GIB:.1f} GiB free -> {verdict}"


def shortfall(need: float, profile: Profile) -> str | None:
    """Why a step that needs ``need`` GiB would not fit on this GPU now, or ``None`` (it fits, or no GPU)."""
    if profile.device_class != "cuda" or not need:
        return None
    free = free_gpu_bytes(profile)[0] / GIB
    return None if free >= need else f"needs about {need:g} GiB of GPU memory, {free:.1f} GiB free here"


def lesson_shortfall(key: int | str, profile: Profile) -> str | None:
    """Why lesson ``key``'s largest step would not fit on this GPU now, or ``None`` (it fits, or no GPU)."""
    from coursekit.lessons import lesson

    return shortfall(lesson(key).full_memory_gib, profile)


def lesson_fits(key: int | str, profile: Profile) -> str:
    """:func:`fits` for lesson ``key`` (number, id or topic), from its manifest's ``full_memory_gib``."""
    from coursekit.lessons import lesson

    return fits(lesson(key).full_memory_gib, profile)


def lesson_estimates(topic: str, profile: Profile) -> list[Estimate]:
    """Every case of lesson ``topic``'s ``sizes.py`` (none if it has none) for ``profile``."""
    from coursekit.lessons import lesson

    try:
        sizes = lesson(topic).module("sizes")
    except ModuleNotFoundError:
        return []
    return [estimate(case, profile) for case in sizes.cases(profile)]


def main(argv: list[str] | None = None) -> int:
    from coursekit.lessons import lessons

    parser = argparse.ArgumentParser(prog="python -m coursekit.memory", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="full", help="profile whose sizes are estimated (default: full)")
    args = parser.parse_args(argv)
    profile = get_profile(args.profile, device="cpu")
    for item in lessons():
        estimates = lesson_estimates(item.topic, profile)
        if not estimates:
            print(f"lesson {item.number} ({item.topic}): no sizes.py (its models do not grow with the profile)")
            continue
        print(f"lesson {item.number} ({item.topic}): needs about {need_gib(estimates):g} GiB")
        for e in estimates:
            print(f"  {e.describe()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
