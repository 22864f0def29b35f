"""Lesson 5's building blocks: planted compiler bugs, the backend ladder, and its measurements.

A compile that crashes or gives wrong results is hard to teach with a real bug: real bugs get fixed,
and which release has which is a moving target. So the lesson *plants* bugs, in the two places where
most real ones live, and restores torch exactly as it was afterwards:

* a **decomposition**: AOTAutograd's ``aot_eager_decomp_partition`` and Inductor both rewrite many
  operators into simpler ones with Inductor's decomposition table
  (``torch._inductor.decomposition.select_decomp_table()``). A wrong or crashing entry there shows up
  from ``aot_eager_decomp_partition`` on;
* a **lowering**: Inductor turns each remaining ATen operator into its own loop-level IR with a
  *lowering* (``torch._inductor.lowering.lowerings``). A wrong or crashing lowering shows up only with
  ``inductor``.

:func:`planted` installs :class:`Bug` s for the length of a ``with`` block. It also turns off the
on-disk FX-graph and AOTAutograd caches inside the block, so a buggy compile is never saved for (or
read from) a later one, and clears Dynamo's in-memory cache on the way in and out.

The lesson also reproduces a *real* failure: a frozen teacher run under ``torch.inference_mode()``
inside a compiled training graph (lesson 3), which AOTAutograd cannot trace.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from torch import nn

LADDER = ("eager", "aot_eager", "aot_eager_decomp_partition", "inductor")
LAYERS = {
    "eager": "Dynamo only: the captured graph runs as Python calls",
    "aot_eager": "+ AOTAutograd: functionalised ATen graph, backward traced; none of Inductor's decompositions",
    "aot_eager_decomp_partition": "+ Inductor's decompositions and its forward/backward partitioner",
    "inductor": "+ Inductor's graph passes, lowerings and generated code",
}
KINDS = {
    "wrong_decomposition": "the decomposition gives a slightly wrong result",
    "crashing_decomposition": "the decomposition raises",
    "wrong_lowering": "the lowering gives a slightly wrong result",
    "crashing_lowering": "the lowering raises",
}
PLANTED_ENV = "COURSEKIT_PLANTED"  # "kind:op,kind:op": bugs a child process installs (plant_from_env)
WRONG_FACTOR = 1.0625  # a planted wrong result is the right one times this
aten = torch.ops.aten
_MISSING = object()


class PlantedBugError(RuntimeError):
    """Raised by a planted crashing decomposition or lowering."""


@dataclass(frozen=True)
class Bug:
    """One planted compiler bug: ``kind`` (see ``KINDS``) in the handling of ``aten.<op>.default``."""

    kind: str
    op: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"bug kind {self.kind!r}: choose one of {list(KINDS)}")
        if not hasattr(aten, self.op):
            raise ValueError(f"aten has no operator {self.op!r}")

    @property
    def overload(self) -> torch._ops.OpOverload:
        return getattr(aten, self.op).default

    @property
    def layer(self) -> str:
        """``decomposition`` or ``lowering``."""
        return self.kind.split("_", 1)[1]

    def __str__(self) -> str:
        return f"{self.kind.split('_')[0]} {self.layer} of aten.{self.op}"

    @classmethod
    def parse(cls, text: str) -> Bug:
        kind, _, op = text.partition(":")
        return cls(kind.strip(), op.strip())


def _decomposition_tables() -> list[dict]:
    """Inductor's decomposition table in both forms ``select_decomp_table()`` may return."""
    from torch._inductor import decomposition

    return [decomposition.decompositions, decomposition.fast_random_decomps()]  # the second is a cached copy


def _wrong(original: Callable, scale: Callable[[Any], Any]) -> Callable:
    def wrong(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        if out is NotImplemented:
            return out
        if not isinstance(out, tuple):
            return scale(out)
        first = next(i for i, t in enumerate(out) if t is not None)  # a backward's grad_input may be None
        return (*out[:first], scale(out[first]), *out[first + 1 :])

    return wrong


def _crash(bug: Bug) -> Callable:
    def crash(*args: Any, **kwargs: Any) -> Any:
        raise PlantedBugError(f"planted bug: {bug}")

    return crash


def install(*bugs: Bug) -> Callable[[], None]:
    """Install ``bugs`` now; returns a function that puts every table back exactly as it was."""
    from torch._inductor import lowering

    saved: list[tuple[dict, Any, Any]] = []
    try:
        for bug in bugs:
            key = bug.overload
            tables = _decomposition_tables() if bug.layer == "decomposition" else [lowering.lowerings]
            for table in tables:
                original = table.get(key, _MISSING)
                if original is _MISSING:
                    raise ValueError(f"Inductor has no {bug.layer} for aten.{bug.op}.default to plant a bug in")
                if bug.kind == "wrong_decomposition":
                    replacement = _wrong(original, lambda t: t * WRONG_FACTOR)
                elif bug.kind == "wrong_lowering":
                    replacement = _wrong(original, lambda t: lowering.lowerings[aten.mul.Tensor](t, WRONG_FACTOR))
                else:
                    replacement = _crash(bug)
                saved.append((table, key, original))
                table[key] = replacement
    except BaseException:
        _restore(saved)
        raise
    return lambda: _restore(saved)


def _restore(saved: list[tuple[dict, Any, Any]]) -> None:
    for table, key, original in reversed(saved):
        table[key] = original


@contextlib.contextmanager
def planted(*bugs: Bug) -> Iterator[tuple[Bug, ...]]:
    """Compile with ``bugs`` planted inside the block; torch is left as it was afterwards.

    Inside, the on-disk FX-graph and AOTAutograd caches are off (nothing buggy is stored or
    reused), and Dynamo's in-memory cache is cleared on the way in and on the way out.
    """
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    no_caches = (
        inductor_config.patch(fx_graph_cache=False, fx_graph_remote_cache=False),
        functorch_config.patch(enable_autograd_cache=False, enable_remote_autograd_cache=False),
    )
    with no_caches[0], no_caches[1]:
        restore = install(*bugs)
        torch.compiler.reset()
        try:
            yield bugs
        finally:
            restore()
            torch.compiler.reset()


def plant_from_env(var: str = PLANTED_ENV) -> tuple[Bug, ...]:
    """Install the bugs named in ``$COURSEKIT_PLANTED`` for the rest of this process (for child
    processes such as the minifier's), with the on-disk compile caches off. Returns them."""
    text = os.environ.get(var, "").strip()
    if not text:
        return ()
    bugs = tuple(Bug.parse(part) for part in text.split(",") if part.strip())
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = False
    functorch_config.enable_autograd_cache = False
    install(*bugs)
    return bugs


def env_for(*bugs: Bug) -> dict[str, str]:
    """Environment variables that make a child process call :func:`plant_from_env` with ``bugs``."""
    return {PLANTED_ENV: ",".join(f"{b.kind}:{b.op}" for b in bugs)}


# --- the thread-local dispatcher state a crash can leave behind -------------------------------------


def _dispatch_keys() -> tuple[frozenset, frozenset]:
    keys = [k for k in torch._C.DispatchKey.__members__.values()]
    return (
        frozenset(k for k in keys if torch._C._dispatch_tls_is_dispatch_key_included(k)),
        frozenset(k for k in keys if torch._C._dispatch_tls_is_dispatch_key_excluded(k)),
    )


def leftover_dispatch_keys(before: tuple[frozenset, frozenset]) -> list[str]:
    """Dispatch keys switched on (``+Key``) or off (``-Key``) in this thread since ``before``."""
    included, excluded = _dispatch_keys()
    return sorted(
        [f"+{k.name}" for k in included - before[0]]
        + [f"-{k.name}" for k in excluded - before[1]]
        + [f"{k.name} no longer included" for k in before[0] - included]
        + [f"{k.name} no longer excluded" for k in before[1] - excluded]
    )


@contextlib.contextmanager
def restore_dispatch_state() -> Iterator[tuple[frozenset, frozenset]]:
    """Put this thread's dispatcher key sets back as they were on entry.

    A compile that fails in the middle of AOTAutograd's tracing (the inference-mode teacher below)
    can leave Python dispatch keys switched on, after which even ``torch.empty(3)`` fails with
    ``INTERNAL ASSERT FAILED ... PythonDispatcherTLS was not set``. Restarting the process is the
    safe fix; this puts the thread-local key sets back, enough for a lesson to carry on.

    Catch the exception *inside* the block: the failed compile's dispatcher guards live in the frames of
    its traceback, and they switch keys again when that traceback is freed.
    """
    before = _dispatch_keys()
    try:
        yield before
    finally:
        included, excluded = _dispatch_keys()
        for key in included ^ before[0]:
            torch._C._dispatch_tls_set_dispatch_key_included(key, key in before[0])
        for key in excluded ^ before[1]:
            torch._C._dispatch_tls_set_dispatch_key_excluded(key, key in before[1])


def reset_bisector() -> bool:
    """Switch the compiler bisector off if a bisection that stopped half-way left it on; True if it had.

    While ``CompilerBisector.do_bisect`` runs, every ``torch.compile`` in the process compiles with the
    backend being bisected; ``do_bisect`` undoes that when it returns, but an exception escaping from
    the test function can leave the state behind until its traceback is freed.
    """
    import shutil

    from torch._inductor.compiler_bisector import CompilerBisector

    leftover = CompilerBisector.bisection_enabled or CompilerBisector.in_process_cache is not None
    if CompilerBisector.in_process_cache:
        shutil.rmtree(CompilerBisector.in_process_cache, ignore_errors=True)
    CompilerBisector.in_process_cache = None
    CompilerBisector.bisection_enabled = False
    if CompilerBisector.get_backend() is not None:  # status files in the compile cache's bisect folder
        shutil.rmtree(CompilerBisector.get_dir(), ignore_errors=True)
        leftover = True
    return leftover


# --- the lesson's models ----------------------------------------------------------------------------


class TinyNet(nn.Module):
    """LayerNorm, an MLP with GELU, a tanh-squashed residual and a classifier head: ``[B, T, D] -> [B, C]``."""

    def __init__(self, dim: int = 32, hidden: int = 64, classes: int = 10) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.down(F.gelu(self.up(self.norm(x))))
        x = x + torch.tanh(h)
        return self.head(x.mean(1))


class TinyDistiller(nn.Module):
    """Lesson 3's set-up in miniature: a student and a frozen teacher inside one training module.

    The teacher prepends a learned class token to its input, as a ViT does, and runs under
    ``teacher_mode`` (``"no_grad"`` or ``"inference_mode"``); ``forward`` returns the KL loss.
    """

    def __init__(self, teacher_mode: str = "no_grad", dim: int = 32, classes: int = 10) -> None:
        super().__init__()
        self.teacher_mode = teacher_mode
        self.student = nn.Linear(dim, classes)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.teacher = nn.Linear(dim, classes)
        self.cls_token.requires_grad_(False)
        self.teacher.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        context = torch.inference_mode() if self.teacher_mode == "inference_mode" else torch.no_grad()
        with context:
            tokens = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
            teacher_logits = self.teacher(tokens)[:, 0]
        student_logits = self.student(x[:, 0])
        return F.kl_div(
            F.log_softmax(student_logits, -1), F.log_softmax(teacher_logits, -1), log_target=True, reduction="batchmean"
        )


def lesson_input(seed: int = 0, device: str = "cpu", batch: int = 4, tokens: int = 8, dim: int = 32) -> torch.Tensor:
    """Random ``[batch, tokens, dim]`` activations, made on the CPU from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, tokens, dim, generator=gen).to(device)


@dataclass(frozen=True)
class Case:
    """One failing compile of the lesson: a model, and the bugs planted while it compiles."""

    name: str
    bugs: tuple[Bug, ...]
    make: Callable[[], nn.Module]
    note: str


LESSON_CASES: dict[str, Case] = {
    c.name: c
    for c in (
        Case("no bug", (), TinyNet, "nothing planted: every rung should pass"),
        Case("crash in Inductor", (Bug("crashing_lowering", "tanh"),), TinyNet, "Inductor's lowering of tanh raises"),
        Case(
            "wrong decomposition",
            (Bug("wrong_decomposition", "gelu"),),
            TinyNet,
            "GELU's decomposition is off by a few per cent",
        ),
        Case("wrong lowering", (Bug("wrong_lowering", "rsqrt"),), TinyNet, "Inductor's rsqrt is off by a few per cent"),
        Case(
            "inference-mode teacher",
            (),
            lambda: TinyDistiller("inference_mode"),
            "a real failure: the teacher runs under torch.inference_mode() inside a training graph",
        ),
    )
}


def build_case(name: str, device: str = "cpu", seed: int = 0) -> tuple[nn.Module, tuple[torch.Tensor]]:
    """The model of case ``name`` (seeded weights) and its input, on ``device``."""
    torch.manual_seed(seed)
    return LESSON_CASES[name].make().to(device), (lesson_input(seed, device),)


def run_python(
    code: str, cwd: str | os.PathLike, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh Python (this one's interpreter) in ``cwd``, with ``env`` added to the
    environment; stdout and stderr are captured. A crashed or broken compile cannot harm the caller.

    Past ``timeout`` seconds the script is stopped and a ``TimeoutError`` says so, with the end of its output."""
    try:
        return subprocess.run(
            [sys.executable, "-c", code],
            cwd=cwd,
            env={**os.environ, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        tail = exc.stderr or exc.stdout or ""
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        raise TimeoutError(
            f"the script in {cwd} ran past its {timeout:.0f} s limit and was stopped (a GPU's cold compiles, or a "
            f"minifier with many candidates, can take longer: pass a larger timeout). Its last output:\n"
            f"{tail[-1500:]}"
        ) from None


# --- measuring the ladder ---------------------------------------------------------------------------


def gist(exc: BaseException) -> str:
    """The line of an exception's message that says what went wrong, without the advice torch appends."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for marker in ("PlantedBugError", "Error:", "Exception:"):
        hits = [ln for ln in lines if marker in ln]
        if hits:
            line = hits[-1][hits[-1].index(marker) :] if marker == "PlantedBugError" else hits[-1]
            return line.lstrip(")( ")[:200]
    return (lines[0] if lines else type(exc).__name__)[:200]


def run_rung(fn: Callable, args: Sequence[Any], backend: str, expected: torch.Tensor, device: str = "cpu") -> dict:
    """Compile ``fn`` with ``backend`` after ``torch.compiler.reset()`` and call it once.

    Returns the backend, the seconds the first call took (compiling included), the largest absolute
    difference from ``expected`` (``None`` after a crash), the exception's type and gist, and a status:
    ``ok``, ``wrong`` (not within rtol=1e-3, atol=1e-4 of eager) or ``crash``.
    """
    from coursekit.timing import synchronize

    torch.compiler.reset()
    synchronize(device)  # eager's expected output finishes before the clock starts
    start = time.perf_counter()
    row: dict[str, Any] = {"backend": backend, "error": None, "max_abs_diff": None}
    with restore_dispatch_state():  # a crash half-way through tracing must not spoil the next rung
        try:
            out = torch.compile(fn, backend=backend)(*args)
            synchronize(device)
            row["max_abs_diff"] = (out.detach().double() - expected.detach().double()).abs().max().item()
        except Exception as exc:  # noqa: BLE001 - a crash is a result here
            row["error"] = f"{type(exc).__name__}: {gist(exc)}"
    row["seconds"] = time.perf_counter() - start
    ok = row["error"] is None and torch.allclose(out.detach(), expected.detach(), rtol=1e-3, atol=1e-4)
    row["status"] = "ok" if ok else ("crash" if row["error"] else "wrong")
    return row


def measure_ladder(
    fn: Callable, args: Sequence[Any], device: str = "cpu", backends: Sequence[str] = LADDER
) -> list[dict]:
    """:func:`run_rung` for every backend of the ladder, each against ``fn``'s eager output."""
    expected = fn(*args)
    return [run_rung(fn, args, backend, expected, device) for backend in backends]


def ladder_chart(results: dict[str, list[dict]], title: str) -> Figure:
    """Two panels, one group of bars per case and one bar per backend: the first call's time
    (compiling included) and the largest difference from eager. A crash is an x and no bar; a result
    identical to eager is a short bar marked 0."""
    from matplotlib.ticker import FuncFormatter

    names = list(results)
    backends = [r["backend"] for r in results[names[0]]]
    fig = Figure(figsize=(11, 6.5), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    width = 0.8 / len(backends)
    colors = ("#90a4ae", "#1565c0", "#6a1b9a", "#ef6c00")
    floor = 1e-10  # where the difference axis starts; a bit-identical result is drawn just above it
    diffs = [r["max_abs_diff"] for rows in results.values() for r in rows if r["max_abs_diff"]]
    high = max([1.0, *diffs]) * 30
    for j, backend in enumerate(backends):
        xs = [i + (j - (len(backends) - 1) / 2) * width for i in range(len(names))]
        rows = [next(r for r in results[n] if r["backend"] == backend) for n in names]
        color = colors[j % len(colors)]
        top.bar(xs, [r["seconds"] for r in rows], width, color=color, label=backend)
        for x, r in zip(xs, rows):
            if r["status"] == "crash":
                bottom.plot([x], [high / 10], marker="x", color="#c62828", markersize=11, mew=2.5)
            elif r["max_abs_diff"] == 0:
                bottom.bar([x], [floor * 2], width, color=color, bottom=floor)
                bottom.annotate("0", (x, floor * 3), ha="center", fontsize=8)
            else:
                bottom.bar([x], [r["max_abs_diff"] - floor], width, color=color, bottom=floor)
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    top.set_yscale("log")
    top.yaxis.set_major_formatter(plain)
    top.yaxis.set_minor_formatter(plain)
    top.tick_params(axis="y", which="minor", labelsize=7)
    top.set_ylabel("first call, s (log)\ncompiling included")
    top.legend(ncols=len(backends), fontsize=8, loc="upper left")
    bottom.set_yscale("log")
    bottom.set_ylim(floor, high)
    bottom.axhline(1e-4, color="#2e7d32", lw=1, ls="--")
    bottom.annotate("atol of the comparison", (-0.45, 1.5e-4), color="#2e7d32", fontsize=8)
    bottom.set_ylabel("max |compiled - eager| (log)\nx: the compile crashed")
    bottom.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0e}" if v > 0 else ""))
    bottom.set_xticks(range(len(names)), names)
    for ax in (top, bottom):
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title)
    return fig
