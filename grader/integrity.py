"""Tamper detection: the functions grading relies on must not be replaced by a submission.

The worker takes a ``snapshot`` after importing the grader and before loading
the notebook, and compares it after loading and after every check.  Any
replaced clock, timing or statistics function, assertion helper, check,
reference or pipe method is reported by name.
"""

from __future__ import annotations

import inspect
import multiprocessing.connection
import statistics
import sys
import time
from types import ModuleType

import torch

GUARDED_PREFIXES = ("coursekit.", "grader.")  # every module of the kit loaded before learner code runs


def _module_functions(module: ModuleType) -> dict[str, object]:
    return {f"{module.__name__}.{name}": obj for name, obj in vars(module).items()
            if inspect.isfunction(obj) or inspect.isclass(obj) or name == "_clock"}


def _targets() -> dict[str, object]:
    targets: dict[str, object] = {
        "time.perf_counter": time.perf_counter, "time.perf_counter_ns": time.perf_counter_ns,
        "time.monotonic": time.monotonic, "time.time": time.time, "time.sleep": time.sleep,
        "statistics.quantiles": statistics.quantiles, "statistics.median": statistics.median,
        "torch.allclose": torch.allclose, "torch.cuda.synchronize": torch.cuda.synchronize,
        "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
        "torch.Tensor.backward": torch.Tensor.backward,
        "Connection.send": multiprocessing.connection.Connection.send,
    }
    for name, module in list(sys.modules.items()):
        if name.startswith(GUARDED_PREFIXES) and module is not None:
            targets.update(_module_functions(module))
    return targets


def snapshot() -> dict[str, int]:
    """Identity of every guarded object."""
    return {name: id(obj) for name, obj in _targets().items()}


def tampered(before: dict[str, int]) -> list[str]:
    """Names of guarded objects replaced since ``before`` was taken."""
    now = snapshot()
    return sorted(name for name, ident in before.items() if now.get(name) != ident)
