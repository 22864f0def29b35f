"""Probes run in the learner's own kernel, on the notebook's namespace: quick feedback while they work, never a
grade (``grader.notebook``). The grade runs them in a sandboxed worker (``grader.learner.RemoteLearner``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from coursekit.profile import Profile
from grader import containment
from grader.learner_failures import explain
from grader.protocol import Answer, pack, unpack


class LocalLearner:
    """Probes run in this very process, on a namespace (a learner's own notebook): feedback, never a grade."""

    local = True

    def __init__(self, namespace: dict[str, Any], exercise: str, profile: Profile) -> None:
        from grader.exercises import part

        self.namespace, self.exercise, self.profile = namespace, exercise, profile
        self.problems: list[str] = []
        self.state: dict = {}
        self.deadline = float("inf")
        self.needs: tuple[str, ...] | None = None  # the running check's needs (set by grader.results.run_check)
        self.check_id: str | None = None  # the running check (set there too)
        part(exercise, "probes")  # registers this exercise's probes in this process

    def start(self, fresh: bool = False) -> None:
        self.state = {}

    def ask(
        self,
        probe: str,
        args: dict | None = None,
        tensors: dict[str, torch.Tensor] | None = None,
        what: str = "this check",
    ) -> Answer:
        from grader import probing
        from grader.interface import contract
        from grader.pinned import Pinned

        call = probing.Call(
            self.namespace,
            args or {},
            {k: v.detach().cpu().clone() for k, v in (tensors or {}).items()},
            self.profile.device,
            self.state,
            None if self.needs is None else frozenset(self.needs),
        )
        before = Pinned.now()  # this kernel's own: the grade's worker starts every probe at torch's defaults
        before.restore()  # forgets unsafe-stance calls noted before this probe
        try:
            reply = probing.run(probe, call)
            if moved := before.moved():
                before.restore()
                raise probing.Failure(moved)
        except Exception as exc:  # noqa: BLE001 - the learner's failure, explained as the grader would
            error = probing.describe_error(exc)
            raise explain(error, contract(self.exercise, error.get("name")), self.problems, probe) from None
        _, tensors_out = unpack(pack({}, reply.tensors))  # the same copies and checks as over the wire
        return Answer(probe, dict(reply.values), tensors_out)

    @contextlib.contextmanager
    def frozen(self) -> Iterator[int]:
        yield 0

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        yield

    @contextlib.contextmanager
    def same_cores(self, cpus: set[int]) -> Iterator[None]:
        """This process on ``cpus`` inside the block: here the learner's code and the baseline share it."""
        with containment.same_cores(set(), cpus):
            yield

    def cpu_ns(self) -> int | None:
        return None  # the learner and the baseline share this process: nothing to tell apart

    def close(self) -> None:
        self.state = {}
