"""The narrow interface between the grader and a learner's notebook.

Like CS336's adapters, this is the only place that says which names the
grader reads from a submission and what each must be.  Notebooks can change
freely around these names without breaking the grader.

How a notebook is read: ``grader.loader`` runs only the *definitions* in its
code cells (imports, ``def``, ``class`` and UPPER_CASE constants), never demo
cells, in a fresh module inside a separate process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Name:
    """One name a submission must define."""

    name: str
    contract: str


INTERFACE: dict[str, dict[str, Name]] = {
    "ex01": {
        n.name: n
        for n in (
            Name("SmoothedCE", "class SmoothedCE(nn.Module): __init__(class_weights: Sequence[float], "
                 "smoothing: float = 0.1, ignore_index: int = -100); forward(logits [N, C], target [N] int64) "
                 "-> scalar tensor. Hand-written; the grader calls .to(device) on it."),
            Name("builtin_smoothed_ce", "def builtin_smoothed_ce(class_weights, smoothing=0.1, "
                 "ignore_index=-100) -> nn.Module: the same loss from PyTorch's built-in module."),
            Name("compile_loss", "def compile_loss(loss: nn.Module, backend='inductor') -> Callable: "
                 "the loss compiled as one graph with torch.compile(..., backend=backend)."),
            Name("train_step", "def train_step(model, loss_fn, optimizer, images, labels) -> Tensor: one "
                 "optimisation step returning the loss as a detached tensor, without reading it on the host."),
        )
    },
    "ex02": {
        n.name: n
        for n in (
            Name("calibrate", "@torch.library.custom_op('ex02::calibrate', mutates_args=()) def calibrate(top: "
                 "Tensor [N]) -> Tensor [N]: np.interp(top, CALIBRATION_X, CALIBRATION_Y) on top's device and "
                 "dtype, with a register_fake implementation."),
            Name("FixedScorer", "class FixedScorer(BrokenScorer): same constructor and parameters; forward(x) "
                 "-> same result as BrokenScorer without graph breaks; keeps a `mean_activation` buffer."),
        )
    },
}

INTERFACE["ex00"] = {
    n.name: n
    for n in (
        Name("capture_graph", "def capture_graph(fn, *args) -> torch.fx.GraphModule: the graph Dynamo hands a "
             "backend when fn is compiled (a backend of your own that keeps it and returns gm.forward) and called "
             "on args."),
        Name("count_compiles", "def count_compiles(fn, shapes, dynamic=False) -> list[int]: after "
             "torch.compiler.reset(), fn compiled with a CompileCounter backend and dynamic=dynamic, called on "
             "torch.randn(shape) for each shape; the graphs compiled so far after each call."),
        Name("inductor_code", "def inductor_code(fn, *args) -> str: the code Inductor generates for "
             "torch.compile(fn) called on args (torch._inductor.utils.run_and_get_code), joined into one string."),
    )
}

INTERFACE["ex03"] = {
    n.name: n
    for n in (
        Name("DistillLoss", "class DistillLoss(nn.Module): __init__(temperature: float = TEMPERATURE, alpha: float = "
             "ALPHA); forward(student_logits [N, C], teacher_logits [N, C], labels [N] int64) -> scalar tensor: "
             "alpha * T**2 * KL(softmax(t/T) || softmax(s/T)) (batchmean) + (1 - alpha) * CE(s, labels)."),
        Name("Distiller", "class Distiller(nn.Module): __init__(student, teacher, loss) freezes the teacher; "
             "forward(images, labels) -> the loss of the student's logits against the teacher's (under no_grad)."),
        Name("make_train_step", "def make_train_step(distiller, optimizer, backend='inductor') -> step(images, "
             "labels) -> detached loss: the Distiller compiled as one graph with torch.compile(..., backend=backend), "
             "then backward and optimizer.step()."),
        Name("extract_student", "def extract_student(model) -> nn.Module: the plain student inside a Distiller or a "
             "torch.compile'd Distiller, for inference and saving."),
    )
}

INTERFACE["ex04"] = {
    n.name: n
    for n in (
        Name("bucket_length", "def bucket_length(n: int) -> int: the padded length (>= n, non-decreasing, at most "
             "MAX_BUCKETS distinct values over 1..MAX_LEN) for a batch whose longest sequence has n tokens."),
        Name("collate", "def collate(seqs: list[Tensor]) -> (tokens [B, bucket_length(longest)] int64 padded with "
             "PAD, mask [B, same] bool, True on real tokens)."),
        Name("MaskedTagger", "class MaskedTagger(NaiveTagger): forward(tokens, mask) -> logits [B, classes], equal "
             "to NaiveTagger on each unpadded sequence, with no Python-scalar guard."),
        Name("compile_tagger", "def compile_tagger(model, backend='inductor') -> Callable: the model compiled with "
             "torch.compile(..., backend=backend) for a stream of bucketed batches."),
    )
}

INTERFACE["ex05"] = {
    n.name: n
    for n in (
        Name("first_failing_backend", "def first_failing_backend(fn, args: tuple) -> str | None: fn(*args) (a tensor) "
             "is run eagerly once for reference; then for each backend of eager, aot_eager, "
             "aot_eager_decomp_partition, inductor in that order: torch.compiler.reset() and "
             "torch.compile(fn, backend=backend)(*args). A backend fails when the call raises an Exception or its "
             "output is not close to the eager one (a tolerance well above rounding, e.g. rtol=1e-3, atol=1e-4). "
             "Returns the first failing backend's name, or None when all four pass; never raises for a failing "
             "compile."),
        Name("find_culprit", "def find_culprit(fn, args: tuple) -> tuple[str, str | None, str | None] | None: "
             "torch._inductor.compiler_bisector.CompilerBisector.do_bisect(test) where test() runs "
             "torch.compiler.reset(), calls torch.compile(fn)(*args) and returns True when the output is close to "
             "eager's (False on a mismatch or an exception). None when do_bisect returns None, else (backend, "
             "subsystem, op): the BisectionResult's backend and subsystem, and the ATen operator named in its "
             "debug_info without 'aten.', overload or numeric suffix ('hardtanh' from \"<OpOverload(op='aten."
             "hardtanh', overload='default')>\", 'cos' from a graph node 'cos_2'), or None if it names none."),
        Name("FixedGatedMLP", "class FixedGatedMLP(GatedMLP): the same parameters (a GatedMLP's state_dict loads); "
             "forward equals GatedMLP's (outputs and gradients), and compiled with torch.compile (Inductor) while "
             "exercise_bugs() are planted it still matches eager and compiles as one graph (no "
             "torch.compiler.disable, no graph break)."),
    )
}

INTERFACE["ex06"] = {
    n.name: n
    for n in (
        Name("compile_blocks", "def compile_blocks(model: VisionTransformer, backend='inductor') -> nn.Module: "
             "regional compilation: each block of model.blocks compiled in place with block.compile(backend=backend) "
             "(the blocks share one compiled graph; the state_dict keys do not change); returns the model."),
        Name("make_optimizer", "def make_optimizer(model, lr: float = LR) -> torch.optim.AdamW: AdamW over every "
             "parameter with weight_decay=WEIGHT_DECAY and the learning rate held in a tensor (torch.tensor(lr))."),
        Name("make_train_step", "def make_train_step(model, optimizer, scheduler, backend='inductor') -> step(images, "
             "labels) -> detached loss: cross-entropy of model(images), backward, then optimizer.step() and "
             "scheduler.step() inside one function compiled with torch.compile(..., backend=backend), then the "
             "gradients cleared; no recompile when the scheduler changes the learning rate."),
    )
}

NOTEBOOKS: dict[str, str] = {"ex00": "00_orientation.ipynb", "ex01": "01_cross_entropy_ladder.ipynb",
                             "ex02": "02_graph_breaks.ipynb", "ex03": "03_distillation.ipynb",
                             "ex04": "04_dynamic_shapes.ipynb", "ex05": "05_debugging_compile.ipynb",
                             "ex06": "06_compile_time.ipynb"}


def exercise_for(path: Path) -> str | None:
    """The exercise a notebook belongs to, from its ``NN_`` file-name prefix."""
    prefix = path.name.split("_", 1)[0]
    candidate = f"ex{prefix}"
    return candidate if prefix.isdigit() and candidate in INTERFACE else None


@dataclass
class Submission:
    """A learner's definitions for one exercise, as the checks see them."""

    exercise: str
    namespace: dict[str, Any]
    problems: list[str] = field(default_factory=list)  # load-time problems, e.g. a syntax error in cell 7

    def get(self, name: str) -> Any:
        """The learner's ``name``, or an ``AssertionError`` that says what is missing and why."""
        spec = INTERFACE[self.exercise].get(name)
        if spec is None:
            raise KeyError(f"{name!r} is not part of {self.exercise}'s interface (grader/interface.py)")
        if name not in self.namespace:
            why = "".join(f"\n  - {p}" for p in self.problems)
            raise AssertionError(
                f"`{name}` is not defined in your notebook. Expected: {spec.contract}"
                + (f"\nWhile loading your notebook:{why}" if why else "")
            )
        return self.namespace[name]
