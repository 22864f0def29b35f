"""Tamper detection: the functions grading relies on must not be replaced by a submission.

The worker takes a ``snapshot`` after importing the grader and before loading
the notebook, and compares it after loading and after every check.  Any
replaced clock, timing or statistics function, assertion helper, check,
reference or pipe method is reported by name.
"""

from __future__ import annotations

import importlib
import inspect
import multiprocessing.connection
import statistics
import time
from types import ModuleType

import torch

GUARDED_MODULES = ("coursekit.timing", "coursekit.traffic", "coursekit.ex01", "coursekit.ex02",
                   "grader.checks.common", "grader.checks.ex01", "grader.checks.ex02", "grader.reference.ex01",
                   "grader.reference.ex02", "grader.results", "grader.registry", "grader.context")


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
    for name in GUARDED_MODULES:
        try:
            targets.update(_module_functions(importlib.import_module(name)))
        except ImportError:
            continue
    return targets


def snapshot() -> dict[str, int]:
    """Identity of every guarded object."""
    return {name: id(obj) for name, obj in _targets().items()}


def tampered(before: dict[str, int]) -> list[str]:
    """Names of guarded objects replaced since ``before`` was taken."""
    now = snapshot()
    return sorted(name for name, ident in before.items() if now.get(name) != ident)
