"""Exercise 0: the notebook and the names the grader reads from it (ships in the learner kit)."""

from coursekit.lessons import lesson
from grader.exercises import Name

NOTEBOOK = lesson("ex00").exercise  # the lesson's manifest (coursekit/lessons/*/lesson.toml) names it
NAMES = (
    Name(
        "capture_graph",
        "def capture_graph(fn, *args) -> torch.fx.GraphModule: the graph Dynamo hands a backend when fn is "
        "compiled (a backend of your own that keeps it and returns gm.forward) and called on args.",
    ),
    Name(
        "count_compiles",
        "def count_compiles(fn, calls, dynamic=False) -> list[int]: after torch.compiler.reset(), fn "
        "compiled with a CompileCounter backend and dynamic=dynamic, called on each tuple of arguments in calls "
        "(tensors and Python numbers); the graphs compiled so far after each call.",
    ),
    Name(
        "inductor_code",
        "def inductor_code(fn, *args) -> str: the code Inductor generates for torch.compile(fn) called on "
        "args (torch._inductor.utils.run_and_get_code), joined into one string.",
    ),
)

# Interface names that lesson code defines on purpose (the release scan reports them instead of refusing).
SHOWN_IN_LESSONS = {
    "count_compiles": "notebooks/00_orientation.ipynb: the demo of a failing check defines a deliberately wrong "
    "count_compiles",
}
