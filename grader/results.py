"""Running one check and turning any outcome into a ``CheckResult``."""

from __future__ import annotations

import time
import traceback
from dataclasses import asdict, dataclass

from grader.registry import Check, Measured, Shortfall, Unsettled


@dataclass
class CheckResult:
    """One row of a report."""

    id: str
    exercise: str
    kind: str
    points: float
    max_points: int
    passed: bool
    measured: float | None
    required: float | None
    message: str
    seconds: float = 0.0
    timed_s: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def failed(cls, check: Check, message: str, seconds: float = 0.0) -> CheckResult:
        """A zero for ``check`` with ``message`` (used for crashes, hangs and bad notebooks too)."""
        return cls(check.id, check.exercise, check.kind, 0, check.points, False, None, None, message, seconds)


def _where_in_notebook(exc: BaseException) -> str:
    """' (code cell 5, line 3: `x = ...`)' for the deepest frame in the learner's notebook."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith("<notebook cell")]
    if not frames:
        return ""
    f = frames[-1]
    cell = f.filename.removeprefix("<notebook ").removesuffix(">")
    where = f"`{f.name}`, " if f.name != "<module>" else ""
    return f" (in {where}{cell} of the notebook, line {f.lineno}: `{(f.line or '').strip()}`)"


def explain_exception(exc: BaseException) -> str:
    """A teaching message for an exception raised while checking learner code."""
    where = _where_in_notebook(exc)
    if isinstance(exc, NotImplementedError):
        return f"not implemented yet{where}: replace `raise NotImplementedError()` with your solution"
    if type(exc).__module__.startswith("torch._dynamo"):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return (f"torch.compile could not capture your code as one graph{where}: {first}. "
                "Run torch._dynamo.explain(fn)(*args) or set TORCH_LOGS=graph_breaks to see where it breaks.")
    return f"your code raised {type(exc).__name__}: {exc}{where}"


def run_check(check: Check, submission, ctx) -> CheckResult:
    """Run ``check``; every outcome (pass, assertion, exception) becomes a result."""
    start = time.perf_counter()
    measured = required = timed_s = None
    unsettled = False
    try:
        outcome = check.fn(submission, ctx)
    except Shortfall as exc:
        passed, message, measured, required = False, str(exc), exc.measured, exc.required
    except Unsettled as exc:
        passed, message, unsettled = False, str(exc) or f"{check.id} failed", True
    except AssertionError as exc:
        passed, message = False, str(exc) or f"{check.id} failed"
    except Exception as exc:  # noqa: BLE001 - learner code may raise anything
        passed, message = False, explain_exception(exc)
        unsettled = type(exc).__module__.startswith("torch")  # torch may be left half-way through a compile
    else:
        passed, message = True, "ok"
        if isinstance(outcome, Measured):
            measured, required, timed_s = outcome.measured, outcome.required, outcome.timed_s
            message = outcome.detail or message
            limit = ctx.review_above(check.id) if check.kind == "speed" else None
            if limit is not None and measured is not None and measured > limit:
                passed = False
                message = (f"flagged for review: {measured:.1f}x is far above what the reference solution "
                           f"measures on this device class (at most {limit:.1f}x is plausible); {message}")
    seconds = time.perf_counter() - start
    result = CheckResult(check.id, check.exercise, check.kind, check.points if passed else 0, check.points,
                         passed, measured, required, message, round(seconds, 3), timed_s)
    result.unsettled = unsettled  # not a report field: tells the worker to hand the rest to a fresh process
    return result
