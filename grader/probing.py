"""The worker side of a check: probes, which call learner code on the judge's inputs and report what they see.

A probe is a plain function registered under a name (``@probe("ex01.loss")``). It receives a ``Call``: the
learner's definitions, the judge's arguments and input tensors, and the device. It returns a ``Reply`` of
JSON values and tensors. It never decides a grade: the judge compares what it reports with its own
reference. Probes run inside the learner's process, so a determined learner can rewrite them; what that
can and cannot gain is in ``grader/README.md``.

Probes ship in the learner kit: in-notebook public checks run them in the learner's own kernel.
"""

from __future__ import annotations

import linecache
import math
import re
import sys
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from coursekit import traffic
from grader import stance
from grader.protocol import MAX_LEARNER_INT

PROBES: dict[str, Callable[[Call], Reply]] = {}


def probe(name: str) -> Callable[[Callable[[Call], Reply]], Callable[[Call], Reply]]:
    """Register a probe under ``name`` (``exNN.what``)."""

    def register(fn: Callable[[Call], Reply]) -> Callable[[Call], Reply]:
        if name in PROBES:
            raise ValueError(f"probe {name!r} registered twice")
        PROBES[name] = fn
        return fn

    return register


class Missing(Exception):
    """The notebook does not define a name the probe needs."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class Failure(Exception):
    """A teaching failure found by the probe itself (a wrong return type, say). ``unsettled`` marks one after
    which torch in this process may be half-way through a compile: the judge starts a fresh worker."""

    def __init__(self, message: str, unsettled: bool = False) -> None:
        super().__init__(message)
        self.unsettled = unsettled


@dataclass
class Reply:
    """What a probe reports: JSON values and (CPU, detached) tensors."""

    values: dict[str, Any] = field(default_factory=dict)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class Call:
    """One request: the learner's namespace, the judge's arguments and inputs, and state kept across calls."""

    namespace: dict[str, Any]
    args: dict[str, Any]
    inputs: dict[str, torch.Tensor]
    device: str
    state: dict[str, Any]  # per worker: functions staged for timing, and their inputs
    allowed: frozenset[str] | None = None  # the asking check's ``needs``: the only names a probe may read

    def get(self, name: str) -> Any:
        """The learner's ``name``, or ``Missing``; a name the asking check does not list in ``needs`` is a fault
        in the grader (the kit's tests prune what they grade by ``needs``, so they must be complete)."""
        if self.allowed is not None and name not in self.allowed:
            raise Failure(
                f"the grader's probe read {name!r}, which this check does not list in its needs "
                f"({', '.join(sorted(self.allowed))}): a fault in the grader, tell your instructor"
            )
        if name not in self.namespace:
            raise Missing(name)
        return self.namespace[name]

    def arg(self, name: str, default: Any = None) -> Any:
        return self.args.get(name, default)

    def but(self, **args: Any) -> Call:
        """The same call with some arguments replaced."""
        return Call(self.namespace, {**self.args, **args}, self.inputs, self.device, self.state, self.allowed)

    def input(self, name: str, *, grad: bool = False) -> torch.Tensor:
        """Input tensor ``name`` on the device, a fresh leaf (with ``requires_grad`` when asked). Not inside
        ``watch_traffic``: on a GPU the copy would count as the learner's host-to-device traffic."""
        if traffic._open_watches[0]:  # noqa: SLF001 - the watch's own counter, shared with the grader
            raise Failure(
                f"the grader's probe copied its input {name!r} to the device while watching the learner's traffic: "
                "a fault in the grader, tell your instructor"
            )
        t = self.inputs[name].to(self.device, copy=True)  # a new tensor on every call, on the CPU too
        return t.requires_grad_(grad) if grad else t


def plain_on_device(value: Any, what: str) -> torch.Tensor:
    """``value`` checked to be a plain tensor (a subclass can defer or fake its values), where it is."""
    if not isinstance(value, torch.Tensor):
        raise Failure(f"{what} should be a torch.Tensor, got {type(value).__name__}")
    if type(value) is not torch.Tensor and not isinstance(value, torch.nn.Parameter):
        raise Failure(
            f"{what} is a tensor subclass ({type(value).__name__}); return a plain torch.Tensor "
            "(a subclass can defer or fake its values)"
        )
    return value


def plain(value: Any, what: str) -> torch.Tensor:
    """``value`` checked to be a plain tensor (a subclass can defer or fake its values), detached on the CPU."""
    return plain_on_device(value, what).detach().cpu()


def learner_int(value: Any, what: str, hint: str = "") -> int:
    """``value``, a number learner code returned, checked to be a plain int the judge can print and compute with (at
    most ``MAX_LEARNER_INT`` either way): a learner's ``10**400`` is their mistake, said here, never a reply the judge
    refuses as tampering."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise Failure(f"{what} returned {value!r:.60}, not an int. {hint}".strip())
    if abs(value) > MAX_LEARNER_INT:
        digits = math.floor(math.log10(abs(value))) + 1  # str() refuses ints of over 4,300 digits
        raise Failure(f"{what} returned an int of about {digits} digits. {hint}".strip())
    return int(value)


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


# a custom op's errors name the module that implements it, a path on the grading machine: noise to a learner
_IMPLEMENTED_IN = re.compile(r" \(with implementation in <module '[^']*' from '[^']*'>\)")


def without_paths(text: str) -> str:
    """``text`` without the "(with implementation in <module ... from '/path'>)" a custom op's errors carry."""
    return _IMPLEMENTED_IN.sub("", text)


def from_dynamo(exc: BaseException) -> bool:
    """Whether Dynamo raised ``exc`` (its types live in ``torch._dynamo``)."""
    return (type(exc).__module__ or "").startswith("torch._dynamo")


# Dynamo raises from its own frames and names the learner's line in its message instead ("from user code:")
_DYNAMO_USER_CODE = re.compile(r'File "<code cell (\d+)>", line (\d+), in (\S+)')


def where_in_notebook(exc: BaseException) -> str:
    """' (in `fn`, the 5th code cell, line 3: `x = ...`)' for the deepest frame in the notebook (JupyterLab numbers
    no cells, and markdown cells are not counted); for an error Dynamo raised while tracing, the last notebook line
    its message names."""
    frames = [(f, n) for f, n in traceback.walk_tb(exc.__traceback__) if f.f_code.co_filename.startswith("<code cell ")]
    if frames:
        frame, line = frames[-1]
        cell = int(frame.f_code.co_filename.removeprefix("<code cell ").removesuffix(">"))
        name = frame.f_code.co_qualname  # `Distiller.__init__`, not a bare `__init__` (a blind attendee, session 45)
        text = linecache.getline(frame.f_code.co_filename, line)
    elif from_dynamo(exc) and (found := _DYNAMO_USER_CODE.findall(str(exc)[:20_000])):
        cell, line, name = int(found[-1][0]), int(found[-1][1]), found[-1][2]
        text = linecache.getline(f"<code cell {cell}>", line)
    else:
        return ""
    where = f"`{name}`, " if name != "<module>" else ""
    return f" (in {where}the {ordinal(cell)} code cell, line {line}: `{(text or '').strip()}`)"


def gist_of(exc: BaseException, lines: list[str]) -> str:
    """The line of an error message that says what went wrong: the first that names an error, or the first; for a
    graph break Dynamo refused, its title and its explanation ("Failed to trace builtin operator: Dynamo does not
    know how to trace builtin operator `print` ...")."""
    if from_dynamo(exc):
        explained = [ln.strip().removeprefix("Explanation:").strip() for ln in lines if "Explanation:" in ln]
        if lines and explained:
            return f"{lines[0].strip()}: {explained[0]}"[:300]
    return next((ln.strip() for ln in lines if "Error" in ln), lines[0] if lines else "")[:300]


def describe_error(exc: BaseException) -> dict[str, Any]:
    """The error part of an answer: what kind of failure, and where in the notebook."""
    if isinstance(exc, Missing):
        return {"kind": "missing", "name": exc.name}
    if isinstance(exc, Failure):
        return {"kind": "unsettled" if exc.unsettled else "assertion", "message": str(exc)}
    where = where_in_notebook(exc)
    if isinstance(exc, NotImplementedError):
        return {"kind": "not_implemented", "where": where}
    if isinstance(exc, AssertionError):
        return {"kind": "assertion", "message": (str(exc) or "an assert in your code failed") + where}
    module = type(exc).__module__ or ""
    text = without_paths(str(exc)).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return {
        "kind": "exception",
        "type": type(exc).__name__,
        "message": lines[0] if lines else "",
        "gist": gist_of(exc, lines),
        "where": where,
        "torch": module.startswith("torch"),
        "dynamo": from_dynamo(exc),
    }


def learner_call(fn: Callable, args: tuple, what: str, hint: str = "") -> Any:
    """``fn(*args)`` where a torch error (a failed compile, say) becomes an unsettled ``Failure`` naming ``what``,
    with its gist and ``hint``; other errors pass through to ``describe_error``."""
    try:
        return fn(*args)
    except (NotImplementedError, AssertionError, Missing, Failure):
        raise
    except Exception as exc:  # noqa: BLE001 - learner code may raise anything
        if not (type(exc).__module__ or "").startswith("torch"):
            raise
        error = describe_error(exc)
        raise Failure(
            f"{what} raised {type(exc).__name__}: {error['gist']}{error['where']}. {hint}".strip(), unsettled=True
        ) from None


BUILTIN_MODULES = ("_operator", "operator", "math", "builtins")  # C functions a graph may call besides torch's


def torch_own(target: Any) -> bool:
    """Whether a Dynamo graph's ``call_function`` target is torch's own: an ATen or prims operator; a function found
    under its own name in the torch module it names, that module reached from the ``torch`` package itself; or a C
    function of ``operator``, ``math`` or ``builtins``. A custom operator, a function of the learner's let into the
    graph (``allow_in_graph``) or a higher-order operator runs code the graph does not show: red team, session 47,
    ran an eager ``optimizer.step()``, compiled with a backend of its own, inside a custom op named ``addc_step``
    that the counted graph called. Passing this takes setting an attribute of a torch module (a monkeypatch, which
    the static scan flags) or a C extension."""
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        namespace = getattr(target, "namespace", None) or str(getattr(target, "_qualified_op_name", "")).split("::")[0]
        return namespace in ("aten", "prims")
    module, name = getattr(target, "__module__", None), getattr(target, "__name__", None)
    if not isinstance(module, str) or not isinstance(name, str):
        return False
    if module in BUILTIN_MODULES:
        home = sys.modules.get(module) if isinstance(target, types.BuiltinFunctionType) else None
    elif module == "torch" or module.startswith("torch."):
        home = torch  # reached by attributes, not through sys.modules, where any code may add a "torch.x"
        for part in module.split(".")[1:]:
            home = getattr(home, part, None)
    else:
        home = None
    return home is not None and getattr(home, name, None) is target


def foreign_calls(graph: torch.fx.GraphModule) -> list[str]:
    """What a Dynamo graph calls that is not torch's own (``torch_own``), and the submodules it calls: the names,
    for a message."""
    found = []
    for n in graph.graph.nodes:
        if n.op == "call_module" or (n.op == "call_function" and not torch_own(n.target)):
            name = n.target if isinstance(n.target, str) else getattr(n.target, "__qualname__", None) or n.target
            found.append(str(name)[:80])
    return found


def linear_nodes(graph: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """A Dynamo graph's calls of torch's own linear layer (``F.linear``, ``aten.linear``), by identity."""
    linear = (torch.nn.functional.linear, torch.ops.aten.linear, torch.ops.aten.linear.default)
    return [n for n in graph.graph.nodes if n.op == "call_function" and any(n.target is f for f in linear)]


def linear_calls(graph: torch.fx.GraphModule) -> int:
    """How many linear layers a Dynamo graph calls (a graph a counting backend kept): a token compile has none, nor
    does a custom operator or a function of the learner's named like one."""
    return len(linear_nodes(graph))


def op_calls(graph: torch.fx.GraphModule, names: tuple[str, ...]) -> int:
    """How many calls of torch's functions or tensor methods named ``names`` (``"log_softmax"``, ``"exp"``) a Dynamo
    graph holds (a graph a counting backend kept); a function of the learner's by that name is not one."""
    return sum(
        1
        for n in graph.graph.nodes
        if (n.op == "call_method" or (n.op == "call_function" and torch_own(n.target)))
        and getattr(n.target, "__name__", n.target) in names
    )


def graph_runs(backend: Any, *, detail: bool = True) -> Any:
    """A counting backend: Dynamo's ``CompileCounterWithBackend`` (frames, and the graphs it kept in ``.graphs``),
    plus for each graph ``.graphs[i]`` its calls (``.runs[i]``), the storages of the tensors it read
    (``.touched[i]``, data pointers: its own parameters and buffers, where an optimizer's are baked in, and every
    call's arguments, where a module's arrive under ``inline_inbuilt_nn_modules``) and whether it was compiled for
    training (``.training[i]``: grad mode on and an input that requires grad, so AOTAutograd traces a backward too).
    ``.calls`` lists every call in order: the graph's index and each tensor argument's data pointer and shape. A
    frame compiled once and then bypassed shows as a graph that stops running; a graph run with some other module's
    weights shows which it read; a graph run on a stand-in input (a token compile beside eager work) shows in
    ``.calls``. Without ``detail`` a call only counts (``.runs``): cheap enough for timed calls, where
    ``compiled_work`` reads it. Dynamo's testing module is imported here, not with this module: imported early in a
    worker, Inductor fixes its cache folder before the worker points it at its scratch folder."""
    from torch._dynamo.testing import CompileCounterWithBackend

    class GraphRuns(CompileCounterWithBackend):
        def __init__(self) -> None:
            super().__init__(backend)
            self.runs: list[int] = []
            self.touched: list[set[int]] = []
            self.training: list[bool] = []
            self.calls: list[tuple[int, frozenset[tuple[int, tuple[int, ...]]]]] = []
            self.last: tuple[int, tuple, Any] | None = None  # the last run: its graph, arguments and outputs
            self.weighed: dict[tuple[Callable, int], int] = {}
            self.made: list[dict[str, Any]] | None = None  # a list: every run recorded in it (``answer_made``)

        def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Any:
            index = len(self.runs)  # appended before the backend runs, as super() appends the graph
            self.runs.append(0)
            self.touched.append({t.data_ptr() for t in (*gm.parameters(), *gm.buffers())})
            self.training.append(
                torch.is_grad_enabled()
                and any(isinstance(t, torch.Tensor) and t.requires_grad for t in (*example_inputs, *gm.parameters()))
            )
            compiled = super().__call__(gm, example_inputs)

            def run(*args: Any) -> Any:
                self.runs[index] += 1
                stance.note_call()
                if detail:
                    tensors = [a for a in args if isinstance(a, torch.Tensor)]
                    self.touched[index].update(a.data_ptr() for a in tensors)
                    self.calls.append((index, frozenset((a.data_ptr(), tuple(a.shape)) for a in tensors)))
                out = compiled(*args)
                self.last = (index, args, out)  # references only: cheap enough for timed calls
                if self.made is not None:
                    self.record(index, args, out)
                return out

            return run

        def returned(self, value: Any, weight: Callable[[torch.fx.GraphModule], int], allowed: set[int]) -> bool:
            """Whether ``value``, what the learner's code returned, is an output of the last graph run, a graph of
            positive ``weight`` (it holds the work) whose tensor arguments are all in ``allowed`` (data pointers: the
            call's own inputs and the module's weights). The counted work then made the answer, from the real
            inputs: red team, session 47, ran a graph holding the counted operators on a slice of the batch, or on
            a result nobody used, and returned what eager code computed (exercises 1 and 4)."""
            if self.last is None or not isinstance(value, torch.Tensor):
                return False
            index, args, out = self.last
            outs = out if isinstance(out, (list, tuple)) else (out,)
            made = any(
                isinstance(o, torch.Tensor) and o.data_ptr() == value.data_ptr() and o.shape == value.shape
                for o in outs
            )
            inputs = all(a.data_ptr() in allowed for a in args if isinstance(a, torch.Tensor))
            if (weight, index) not in self.weighed:  # once a graph: a timed call pays two lookups
                self.weighed[(weight, index)] = weight(self.graphs[index])
            return made and inputs and self.weighed[(weight, index)] > 0

        def record(self, index: int, args: tuple, out: Any) -> None:
            """One run in ``.made``: its graph, arguments and outputs, and whether a backward has since run through
            its outputs (a hook on each that requires grad)."""
            run = {"index": index, "args": args, "outs": out if isinstance(out, (list, tuple)) else (out,)}
            run["backward"] = False
            self.made.append(run)
            for o in run["outs"]:
                if isinstance(o, torch.Tensor) and o.requires_grad:
                    o.register_hook(lambda grad, run=run: run.__setitem__("backward", True))

        def answer_made(
            self,
            value: Any,
            weight: Callable[[torch.fx.GraphModule], int],
            allowed: set[int],
            inputs: tuple[torch.Tensor, ...] = (),
            work: str = "the work",
        ) -> str | None:
            """Why ``value`` was not made by a graph run recorded in ``.made`` since the caller set it to ``[]``, a
            training graph of positive ``weight`` (it holds ``work``) whose tensor arguments are all in ``allowed``
            (data pointers) or copies of ``inputs``, and through whose output a backward ran; ``None`` where it was.
            Red team, session 47: exercise 3's Distiller ran eagerly beside a compiled shadow of itself on one image
            under ``no_grad``; session 48: the shadow's own loss returned, the backward run on an eager one. With
            ``value`` None, any run's outputs will do: the work was done, whatever was returned."""
            if value is not None and not isinstance(value, torch.Tensor):
                return "it is not a tensor"

            def same(o: Any) -> bool:  # the output itself, or a copy of it (loss.detach().clone(), .item())
                if value is None:  # any run's output will do
                    return isinstance(o, torch.Tensor)
                if not isinstance(o, torch.Tensor) or o.shape != value.shape:
                    return False
                return o.data_ptr() == value.data_ptr() or torch.equal(o.detach(), value.detach().to(o.device, o.dtype))

            def allowed_arg(a: torch.Tensor) -> bool:
                if a.data_ptr() in allowed:
                    return True
                return any(
                    a.shape == x.shape and a.dtype == x.dtype and a.device == x.device and torch.equal(a, x)
                    for x in inputs
                )

            def why_not(run: dict[str, Any]) -> str | None:
                if weight(self.graphs[run["index"]]) <= 0:
                    return f"the graph that made it does not hold {work}"
                if not self.training[run["index"]]:
                    return "the graph that made it was compiled without gradients (under no_grad or inference_mode)"
                if not all(allowed_arg(a) for a in run["args"] if isinstance(a, torch.Tensor)):
                    return "the graph that made it was handed tensors other than the batch and the model's own"
                if not run["backward"]:
                    return "no backward ran through it: the gradients came from elsewhere"
                return None

            reasons = [why_not(r) for r in self.made or [] if any(same(o) for o in r["outs"])]
            if not reasons:
                return (
                    "no graph compiled with the backend you were given ran"
                    if value is None
                    else "it is not an output of a graph compiled with the backend you were given"
                )
            if None in reasons:  # a later graph may pass it on (a whole step compiled: detach() in its last graph)
                return None
            return reasons[-1]

    return GraphRuns()


def named_tensors(module: Any) -> dict[str, torch.Tensor]:
    """Every tensor a module holds, by name: parameters, buffers and plain tensor attributes of it and its
    submodules (what a compiled graph of it may read besides the call's inputs)."""
    if not isinstance(module, torch.nn.Module):
        return {}
    found = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    for prefix, sub in module.named_modules():
        for key, value in vars(sub).items():
            if isinstance(value, torch.Tensor):
                found.setdefault(f"{prefix}.{key}".lstrip("."), value)
    return found


def module_tensors(module: Any) -> set[int]:
    """The data pointers of ``named_tensors(module)``."""
    return {t.data_ptr() for t in named_tensors(module).values()}


def compiled_work(counter: Any, weight: Callable[[torch.fx.GraphModule], int]) -> Callable[[], int]:
    """A running total, for ``stage_timed(..., work=)``: each call of a graph ``counter`` (``graph_runs``) kept,
    times ``weight(graph)`` (its linear layers, say; 0 for a graph that holds none of the work). Weights are worked
    out once a graph."""
    weights: list[int] = []

    def total() -> int:
        weights.extend(weight(g) for g in counter.graphs[len(weights) :])
        return sum(w * n for w, n in zip(weights, counter.runs))

    return total


def run(name: str, call: Call) -> Reply:
    """Run probe ``name`` on ``call`` (a ``KeyError`` for an unknown probe)."""
    reply = PROBES[name](call)
    return reply if isinstance(reply, Reply) else Reply()


# ---------------------------------------------------------------------------------------------- timing
# A function to time is set up by an exercise's probe (``stage_timed(call, handle, fn)``); the judge then
# sends the inputs once (``timing.stage``) and, for each timed sample, only a schedule: which staged input
# each call takes and a secret factor its floating-point tensors are multiplied by (``timing.run``). The
# judge runs its baseline through the same ``run_schedule``, so both sides do the same work per call, and
# no output can be computed before the schedule arrives. Every call leaves a fingerprint in the answer, and
# the judge recomputes some it picks after the answer arrives: skipping calls while timed shows.


def stage_timed(
    call: Call, handle: str, fn: Callable[..., Any], params: tuple = (), work: Callable[[], int] | None = None
) -> Reply:
    """Keep ``fn`` under ``handle`` for timing; ``params``, tensors whose gradients each call computes (a model's
    parameters, for a forward and backward), join every call's fingerprint. ``work`` (``compiled_work``) counts
    what compiled graphs ran: each timed sample reports how much of it its calls did, so a function compiled for
    the calls before timing and eager while timed shows (red team, session 37)."""
    call.state.setdefault("timed", {})[handle] = fn
    call.state.setdefault("timed_params", {})[handle] = tuple(params)
    call.state.setdefault("timed_work", {})[handle] = work
    return Reply({"handle": handle})


SCALE = (0.8, 1.25)  # the range of the secret factors a timed call's floating-point inputs are multiplied by
Scale = float | dict[int, torch.Tensor]  # one factor, or a row of factors per last-dimension width (``multipliers``)


def width(a: torch.Tensor) -> int:
    """The length of ``a``'s last dimension (1 for a scalar): which row of factors multiplies it."""
    return a.shape[-1] if a.dim() else 1


def multipliers(seed: int, calls: int, staged: list[tuple]) -> dict[int, torch.Tensor]:
    """For each last-dimension width of the floating-point tensors in ``staged``, ``[calls, width]`` factors drawn
    uniformly from ``SCALE`` by a generator seeded with ``seed``, on the tensors' device: call ``c`` multiplies each
    column of its inputs by its own factor from row ``c``. One factor a call made every timed output a smooth
    function of a single number, which learner code could tabulate in the untimed first call and then answer most
    timed calls by interpolation without running them (red team, session 33); a factor per column makes it a
    function of hundreds. Both sides draw the table inside their timed sample, from a seed the judge sends with it."""
    floats = [a for args in staged for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]
    if not floats:
        return {}
    generator = torch.Generator(device=floats[0].device).manual_seed(seed)
    return {
        w: torch.empty(calls, w, device=floats[0].device, dtype=torch.float32).uniform_(*SCALE, generator=generator)
        for w in sorted({width(a) for a in floats})
    }


def seeded(schedule: list[tuple[int, Scale]], seed: int | None, staged: list[tuple]) -> list[tuple[int, Scale]]:
    """``schedule`` with each call's factors spelt out (``run_schedule``'s, for a ``seed``): for the judge, which
    recomputes single calls of a sample."""
    if seed is None:
        return schedule
    table = multipliers(seed, len(schedule), staged)
    return [(index, {w: rows[c] for w, rows in table.items()}) for c, (index, _) in enumerate(schedule)]


# each timed call's factors are also multiplied, column by column, by numbers in [1 - CHAIN_DEPTH, 1 + CHAIN_DEPTH]
# drawn from the previous call's fingerprint: cosines of its logarithm, whose phase turns CHAIN_TURNS radians for
# each e-fold (0.1 radian for the judge's 1e-3 tolerance, 1 for a 1% error), shifted by the golden angle from one
# column to the next (so a function that ignores a uniform scale of its input, a normalisation, still sees it).
# No call's inputs are known before the call before it has run (red team 2, session 33: with every call's factors
# known from the seed, learner code computed a sample's calls together, batched, and exercise 2's slow scorer
# passed at 1.37x to 1.86x)
CHAIN_TURNS = 100.0
CHAIN_DEPTH = 0.1
REACH = (SCALE[0] * (1 - CHAIN_DEPTH), SCALE[1] * (1 + CHAIN_DEPTH))  # every factor a chained call can take
GOLDEN_ANGLE = math.pi * (3 - math.sqrt(5))
_OFFSETS: dict[tuple[int, torch.device], torch.Tensor] = {}


def _offsets(w: int, device: torch.device) -> torch.Tensor:
    """Column ``j``'s phase offset, ``j`` golden angles modulo a turn (float32, the same bits on any device)."""
    key = (w, device)
    if key not in _OFFSETS:
        turns = torch.arange(w, dtype=torch.float64) * GOLDEN_ANGLE % (2 * math.pi)
        _OFFSETS[key] = turns.float().to(device)
    return _OFFSETS[key]


def warm_chain(staged: list[tuple]) -> None:
    """Make the column offsets for ``staged``'s widths on its device before any timed sample needs them (on a GPU,
    a copy inside a timed sample would wait for the device)."""
    for args in staged:
        for a in args:
            if isinstance(a, torch.Tensor) and a.is_floating_point():
                _offsets(width(a), a.device)


def link(made: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """The chain's phase for the call after one whose fingerprint is ``(made, grad)``: a scalar on their device,
    computed there (no copy to the host, so no wait for the device). The judge computes it again from the
    fingerprint reported, to the same bits but for an ulp of the logarithm (1e-5 of a factor at most)."""
    return (made + grad).clamp_min_(1e-30).log_().mul_(CHAIN_TURNS)


def chained(scale: Scale, previous: list[torch.Tensor] | tuple[torch.Tensor, ...] | None) -> Scale:
    """``scale`` (a seeded call's rows of factors) times the chain's factors for the ``previous`` call's
    fingerprint (``link``); unchanged for a sample's first call. Three small operations a width."""
    if previous is None or not isinstance(scale, dict):
        return scale
    phase = link(*previous)
    return {
        w: torch.addcmul(rows, rows, torch.cos_(_offsets(w, rows.device) + phase), value=CHAIN_DEPTH)
        for w, rows in scale.items()
    }


def transform(args: tuple, scale: Scale, grads: tuple[bool, ...]) -> tuple:
    """``args`` with each floating-point tensor multiplied by ``scale``, one factor or a row of factors per column
    (a fresh leaf, with grad where asked)."""
    out = []
    for a, grad in zip(args, grads):
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            if isinstance(scale, dict):  # rows on ``a``'s device (``multipliers`` draws them there), in float32:
                factors = scale[width(a)]  # ``a`` keeps its own dtype (a bf16 input stays bf16, as in the first call)
                a = (a * (factors if a.dim() else factors[0])).to(a.dtype)
            else:
                a = a * scale
            if grad:
                a.requires_grad_()
        out.append(a)
    return tuple(out)


def fingerprint(out: Any, args: tuple, params: tuple = ()) -> list[torch.Tensor]:
    """What one timed call computed, in two numbers: the L1 norm of its output, and the summed L1 norms of the
    gradients its inputs and ``params`` received (0 when none did). Neither can be had without the call's work.
    A few reductions, no copies: the baseline pays the same, and a cheap fingerprint keeps the measured speedups
    close to the functions' own."""
    out = plain_on_device(out, "the timed function's result")
    with torch.no_grad():
        made = torch.linalg.vector_norm(out, 1, dtype=torch.float32)
        grads = [a.grad for a in (*args, *params) if isinstance(a, torch.Tensor) and a.grad is not None]
        if not grads:
            return [made, torch.zeros_like(made)]
        if len(grads) == 1:  # an input's gradient (exercise 1's loss): a single reduction, the cheapest
            grad = torch.linalg.vector_norm(grads[0], 1, dtype=torch.float32)
        else:  # a model's parameters: one fused reduction over them all (as clip_grad_norm_ does), then the sum
            grad = torch.stack(torch._foreach_norm(grads, 1, dtype=torch.float32)).sum()
    return [made, grad.to(made.device)]


def run_schedule(
    fn: Callable[..., Any],
    staged: list[tuple],
    schedule: list[tuple[int, Scale]],
    grads: tuple[bool, ...],
    params: tuple = (),
    seed: int | None = None,
    chain: bool = False,
) -> tuple[Any, torch.Tensor]:
    """Call ``fn`` once per schedule entry ``(index, scale)`` on the transformed staged inputs: the last output,
    and every call's ``fingerprint`` (``[calls, 2]``), which the judge checks for calls it picks afterwards.
    With a ``seed``, each call's factors are a row of ``multipliers`` (drawn here, inside the timed sample) in place
    of its entry's ``scale``; with ``chain`` too, each call's factors are multiplied by the ``link`` of the call
    before it, so the calls run one after another. ``params``' gradients are cleared before each call, so each
    call's fingerprint holds its own."""
    params = tuple(p for p in params if isinstance(p, torch.Tensor))
    out, prints, previous = None, [], None
    for index, scale in seeded(schedule, seed, staged):
        args = transform(staged[index], chained(scale, previous) if chain else scale, grads)
        for p in params:
            p.grad = None
        out = fn(*args)
        previous = fingerprint(out, args, params)
        prints += previous
    return out, torch.stack(prints).view(-1, 2)


def _sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


@probe("timing.stage")
def timing_stage(call: Call) -> Reply:
    """Move the judge's input sets to the device and keep them for ``timing.run``."""
    sets, arity = int(call.arg("sets")), int(call.arg("arity"))
    staged = [tuple(call.inputs[f"{i}.{j}"].to(call.device) for j in range(arity)) for i in range(sets)]
    call.state.setdefault("staged", {})[call.arg("handle")] = (staged, tuple(bool(g) for g in call.arg("grads")))
    warm_chain(staged)
    _sync(call.device)
    return Reply({"staged": sets})


@probe("timing.run")
def timing_run(call: Call) -> Reply:
    """Run the staged function on the schedule, wait for the device, report the last output and every call's
    fingerprint."""
    handle = call.arg("handle")
    fn, params = call.state["timed"][handle], call.state.get("timed_params", {}).get(handle, ())
    staged, grads = call.state["staged"][handle]
    schedule = [(int(i), float(s)) for i, s in call.arg("schedule")]
    seed, chain = call.arg("seed"), bool(call.arg("chain", False))
    work = call.state.get("timed_work", {}).get(handle)
    _sync(call.device)
    before = work() if work else 0
    out, prints = run_schedule(fn, staged, schedule, grads, params, None if seed is None else int(seed), chain)
    done = work() - before if work else None
    _sync(call.device)
    values = {} if done is None else {"work": done}
    return Reply(values, {"out": plain(out, "the timed function's result"), "prints": prints.detach().cpu()})
