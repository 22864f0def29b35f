"""What a check raises when learner code fails, and the judge's teaching message for a failure a probe reported
(``explain``). Shared by both learners (``grader.learner``, ``grader.local_learner``)."""

from __future__ import annotations

from typing import Any

from grader.protocol import ERROR_KINDS, ProtocolError, clip


class LearnerFailure(AssertionError):
    """The learner's code failed inside a probe; the message says what to fix."""


class Unsettled(LearnerFailure):
    """A failure after which torch in the worker may be half-way through a compile: the worker is replaced."""


# What to do about an error Dynamo raised, by its type; any other type from torch._dynamo is a graph break
DYNAMO_ADVICE = {
    "TorchRuntimeError": (
        "your code failed while torch.compile traced it (on fake tensors){where}: {first}. Run it without "
        "torch.compile to find the line and the shapes involved."
    ),
    "BackendCompilerFailed": (
        "the compiler backend failed on your code{where}: {first}. Compile with backend='eager', then "
        "'aot_eager', to see which layer fails (lesson 5)."
    ),
    "FailOnRecompileLimitHit": (
        "torch.compile reached its recompile limit{where}: {first}. TORCH_LOGS=recompiles names the guard that "
        "keeps failing."
    ),
    "RecompileError": (
        "torch.compile had to compile again where the stance forbids it{where}: {first}. TORCH_LOGS=recompiles "
        "names the guard that failed."
    ),
}
GRAPH_BREAK_ADVICE = (
    "torch.compile could not capture your code as one graph{where}: {first}. Run torch._dynamo.explain(fn)(*args) "
    "or set TORCH_LOGS=graph_breaks to see where it breaks."
)


class WorkerLost(AssertionError):
    """The worker died, hung, or outgrew its limits during a check; it has been ended."""


def explain(error: dict[str, Any], contract: str, problems: list[str], probe: str) -> LearnerFailure:
    """The judge's teaching message for a failure a probe reported."""
    kind = error.get("kind")
    if kind not in ERROR_KINDS:
        raise ProtocolError(f"probe {probe} reported an unknown kind of failure")
    where = clip(error.get("where") or "")
    if kind == "missing":
        name = clip(error.get("name"), 100)
        why = "".join(f"\n  - {p}" for p in problems)
        return LearnerFailure(
            f"`{name}` is not defined in your notebook. Expected: {contract}"
            + (f"\nWhile loading your notebook:{why}" if why else "")
        )
    if kind == "not_implemented":
        return LearnerFailure(f"not implemented yet{where}: replace `raise NotImplementedError()` with your solution")
    if kind in ("assertion", "unsettled"):
        message = clip(error.get("message") or "your code failed this check")
        return (Unsettled if kind == "unsettled" else LearnerFailure)(message)
    first = clip(error.get("message") or "", 500)
    etype = clip(error.get("type") or "Exception", 80)
    if error.get("dynamo"):
        return Unsettled(DYNAMO_ADVICE.get(etype, GRAPH_BREAK_ADVICE).format(where=where, first=first or etype))
    if "can't allocate memory" in first or "not enough memory" in first or etype == "MemoryError":
        return LearnerFailure(
            f"your code ran out of memory{where}: the grading process may use at most its memory "
            "limit. A huge allocation, or tensors kept alive in a list?"
        )
    failure = Unsettled if error.get("torch") else LearnerFailure
    if etype == "NameError":  # it worked in the notebook: a value the grader's loader does not run
        first += (
            ". The grader runs only your notebook's imports, `def` and `class` statements and UPPER_CASE constants, "
            "never other cells: a name assigned in lower case (or made in a demo cell) is not there when it grades. "
            "Name the constant in UPPER_CASE, or compute it inside your function"
        )
    return failure(f"your code raised {etype}: {first}{where}")
