"""Running one check in the judge and turning any outcome into a ``CheckResult``."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from grader.learner_failures import Unsettled, WorkerLost
from grader.protocol import InconsistentAnswer, ProtocolError
from grader.quiet import judge_compiles_quiet
from grader.registry import Check, Measured, Shortfall


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

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def failed(cls, check: Check, message: str, seconds: float = 0.0) -> CheckResult:
        """A zero for ``check`` with ``message`` (used for crashes, hangs and bad notebooks too)."""
        return cls(check.id, check.exercise, check.kind, 0, check.points, False, None, None, message, seconds)


def run_check(check: Check, learner, ctx) -> CheckResult:
    """Run ``check`` against ``learner``; every outcome (pass, assertion, a lost worker) becomes a result.

    ``ProtocolError`` is not caught: a worker that broke the protocol has its whole submission flagged. Its
    ``InconsistentAnswer`` costs this check only: the result's ``protocol_flag`` attribute (not a report field)
    holds the reason the runner flags the submission with, and ``replace_worker`` asks it for a fresh worker.
    """
    from grader.judging import inconsistent_message

    start = time.perf_counter()
    measured = required = None
    replace_worker = False
    protocol_flag = ""
    learner.needs = check.needs  # its probes may read these names only (grader.probing.Call.get)
    learner.check_id = check.id
    try:
        with judge_compiles_quiet():
            outcome = check.fn(learner, ctx)
    except InconsistentAnswer as exc:
        passed, message, replace_worker, protocol_flag = False, inconsistent_message(str(exc)), True, str(exc)
    except ProtocolError:
        raise
    except Shortfall as exc:
        passed, message, measured, required = False, str(exc), exc.measured, exc.required
    except (Unsettled, WorkerLost) as exc:
        passed, message, replace_worker = False, str(exc) or f"{check.id} failed", True
    except AssertionError as exc:
        passed, message = False, str(exc) or f"{check.id} failed"
    except Exception as exc:  # noqa: BLE001 - a fault in the judge: the learner is not blamed silently
        passed, message = (
            False,
            _out_of_memory(exc)
            or (f"the grader could not run this check ({type(exc).__name__}: {exc}); tell your instructor"),
        )
        replace_worker = True
    else:
        passed, message = True, "ok"
        if isinstance(outcome, Measured):
            measured, required = outcome.measured, outcome.required
            message = outcome.detail or message
            limit = ctx.review_above(check.id) if check.kind == "speed" else None
            if limit is not None and measured is not None and measured > limit:
                passed = False
                message = (
                    f"flagged for review: {measured:.1f}x is far above what the reference solution "
                    f"measures on this device class (at most {limit:.1f}x is plausible); {message}"
                )
    # asks outside a check (timing helpers called directly) are not limited by a stale one
    learner.needs = learner.check_id = None
    seconds = time.perf_counter() - start
    result = CheckResult(
        check.id,
        check.exercise,
        check.kind,
        check.points if passed else 0,
        check.points,
        passed,
        measured,
        required,
        message,
        round(seconds, 3),
    )
    result.replace_worker = replace_worker
    result.protocol_flag = protocol_flag
    return result


def _out_of_memory(exc: Exception) -> str | None:
    """For the GPU running out of memory in the judge, a message that says who held it. The judge shares its GPU
    with its own worker only (a ``grader batch`` slot or an autograde process has a GPU to itself), so what the
    judge's allocator does not hold is the worker's, give or take the judge's CUDA context (some hundreds of MiB)."""
    import torch

    if not isinstance(exc, torch.OutOfMemoryError) or not torch.cuda.is_available():
        return None
    try:
        free, total = torch.cuda.mem_get_info()
        held = total - free - torch.cuda.memory_reserved()
    except RuntimeError:
        return None
    gib = 1 << 30
    return (
        f"the GPU ran out of memory while the grader ran this check, with {held / gib:.1f} GiB of "
        f"its {total / gib:.1f} GiB held outside the grader's tensors: by your code's worker, and some hundreds of "
        "MiB by the grader's own CUDA context. GPU tensors your code keeps alive at load time or between calls (a "
        "cache or a global) leave the grader too little. If your code keeps none, tell your instructor"
    )
