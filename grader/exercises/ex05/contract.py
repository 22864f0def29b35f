"""Exercise 5: the notebook and the names the grader reads from it (ships in the learner kit)."""

from coursekit.lessons import lesson
from grader.exercises import Name

NOTEBOOK = lesson("ex05").exercise  # the lesson's manifest (coursekit/lessons/*/lesson.toml) names it
NAMES = (
    Name(
        "first_failing_backend",
        "def first_failing_backend(fn, args: tuple) -> str | None: fn(*args) (a tensor) is run eagerly once "
        "for reference; then for each backend of eager, aot_eager, aot_eager_decomp_partition, inductor in "
        "that order: torch.compiler.reset() and torch.compile(fn, backend=backend)(*args). A backend fails "
        "when the call raises an Exception or its output is not close to the eager one (a tolerance well "
        "above rounding, e.g. rtol=1e-3, atol=1e-4). Returns the first failing backend's name, or None when "
        "all four pass; never raises for a failing compile.",
    ),
    Name(
        "find_culprit",
        "def find_culprit(fn, args: tuple) -> tuple[str, str | None, str | None] | None: "
        "torch._inductor.compiler_bisector.CompilerBisector.do_bisect(test) where test() runs "
        "torch.compiler.reset(), calls torch.compile(fn)(*args) and returns True when the output is close to "
        "eager's and, when fn is a module with parameters that require grad, so are the gradients of the "
        "output's sum with respect to them, computed afresh in each run (False on a mismatch or an exception). "
        "None when do_bisect returns None, else (backend, "
        "subsystem, op): the BisectionResult's backend and subsystem, and the ATen operator named in its "
        "debug_info without 'aten.', overload or numeric suffix ('hardtanh' from "
        "\"<OpOverload(op='aten.hardtanh', overload='default')>\", 'cos' from a graph node 'cos_2'), or None if"
        " it names none.",
    ),
    Name(
        "FixedGatedMLP",
        "class FixedGatedMLP(GatedMLP): the same parameters (a GatedMLP's state_dict loads); forward equals "
        "GatedMLP's (outputs and gradients), and compiled with torch.compile (Inductor) while exercise_bugs()"
        " are planted it still matches eager (outputs and gradients) and compiles as one graph (no "
        "torch.compiler.disable, no graph break).",
    ),
)
