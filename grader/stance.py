"""Dynamo's stance while learner code runs: the one each probe sets, never one of the learner's own.

``torch.compiler.set_stance`` changes how every compiled function in the process runs. Three of its settings
undo what the probes count (red team, session 39): ``skip_guard_eval_unsafe=True`` reuses a graph without checking
its guards, so a function that should recompile on every call (a call counter) runs one stale graph and counts as
compiled once; ``force_backend=`` compiles with another backend than the one the probe passed, so the probe's
counting backend never sees a graph; and any stance set inside a learner's wrapper replaces the probe's
``fail_on_recompile``. The worker therefore records the stance before it loads a notebook, sets it back before
every probe, and fails a probe after which it moved (``changes``); and the probes' counting backend
(``grader.probing.graph_runs``) notes every compiled call made under an unsafe stance (``note_call``), which
fails the probe too, even where the learner's code set the stance back before returning.
"""

from __future__ import annotations

from typing import Any

SEEN: list[str] = []  # unsafe stances compiled graphs ran under, since the last ``restore``


def _eval_frame() -> Any:
    """Dynamo's module that keeps the stance, imported when first needed (as ``graph_runs`` imports Dynamo's testing
    module: imported early in a worker, Dynamo would set Inductor's cache folder before the worker points it)."""
    import torch._dynamo.eval_frame as eval_frame

    return eval_frame


def current() -> Any:
    """Dynamo's stance now (a ``DynamoStance``: its name, ``skip_guard_eval_unsafe`` and forced ``backend``)."""
    return _eval_frame()._stance


def restore(pinned: Any) -> None:
    """Set the stance back to ``pinned`` and forget the unsafe calls noted so far."""
    _eval_frame()._set_stance(pinned)
    SEEN.clear()


def _unsafe(stance: Any) -> str | None:
    if getattr(stance, "skip_guard_eval_unsafe", False):
        return f"set_stance({stance.stance!r}, skip_guard_eval_unsafe=True), which runs a graph without its guards"
    if getattr(stance, "backend", None) is not None:
        return "set_stance(..., force_backend=...), which compiles with another backend than the grader's"
    return None


def note_call() -> None:
    """Called on every compiled call the probes count: note it if it ran under an unsafe stance."""
    why = _unsafe(_eval_frame()._stance)
    if why is not None and len(SEEN) < 10:
        SEEN.append(why)


def changes(pinned: Any) -> list[str]:
    """What is wrong now: a stance other than ``pinned``, and the unsafe stances compiled calls ran under."""
    found = list(dict.fromkeys(SEEN))
    now = current()
    if now != pinned:
        what = _unsafe(now) or f"set_stance({now.stance!r})"
        found.append(f"{what}, still in force after your code returned")
    return found


def message(found: list[str]) -> str:
    """The teaching message for a probe whose compiled calls ran under a stance of the learner's."""
    return (
        "your code changed Dynamo's stance while the grader counted compiles: "
        + "; ".join(found)
        + ". The grader sets the stance a check needs (fail_on_recompile, say); torch.compiler.set_stance belongs "
        "in demo cells, not in the functions the grader calls."
    )
