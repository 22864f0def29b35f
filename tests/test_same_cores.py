"""A speed check times the judge's baseline and the learner's code on the same cores, and gives the masks back."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time

import pytest
import torch

from coursekit.profile import get_profile
from grader import containment
from grader.batch import slot_cores
from grader.local_learner import LocalLearner
from grader.probing import Call, Reply, probe, stage_timed
from grader.speed import compare

needs_two_cores = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs Linux and 2 cores"
)
SLEEPERS = "import threading, time\nfor _ in range(3): threading.Thread(target=time.sleep, args=(60,)).start()\n"
SEEN: list[set[int]] = []  # this process's cores at each call the comparison makes, either side


def _masks(pid: int) -> set[frozenset[int]]:
    return {frozenset(os.sched_getaffinity(int(tid))) for tid in os.listdir(f"/proc/{pid}/task")}


@needs_two_cores
def test_the_judge_and_every_learner_thread_share_the_cores_then_get_their_masks_back() -> None:
    child = subprocess.Popen([sys.executable, "-c", SLEEPERS])
    try:
        deadline = time.monotonic() + 20
        while len(os.listdir(f"/proc/{child.pid}/task")) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        everything = frozenset(os.sched_getaffinity(0))
        one = {max(everything)}
        with containment.same_cores({child.pid}, one):
            assert _masks(child.pid) == {frozenset(one)}, "every thread of the learner's process, not only its main one"
            assert _masks(os.getpid()) == {frozenset(one)}
        assert _masks(child.pid) == {everything}
        assert _masks(os.getpid()) == {everything}
    finally:
        child.kill()
        child.wait()


def test_local_slots_get_cores_no_other_slot_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    slots = slot_cores(3)
    assert [len(s) for s in slots] == [2, 2, 2]
    assert len(set().union(*slots)) == 6
    assert slot_cores(1) == [None]
    assert slot_cores(9) == [None] * 9  # fewer cores than slots: each slot keeps them all


@probe("test.stage_recording")
def _stage_recording(call: Call) -> Reply:
    def fn(x: torch.Tensor) -> torch.Tensor:
        SEEN.append(os.sched_getaffinity(0))
        return x * 2

    return stage_timed(call, call.arg("handle"), fn)


@needs_two_cores
def test_a_comparison_times_both_sides_on_one_core_when_it_times_single_threaded() -> None:
    learner = LocalLearner({}, "ex01", get_profile("smoke"))
    learner.ask("test.stage_recording", {"handle": "h"})

    def baseline(x: torch.Tensor) -> torch.Tensor:
        SEEN.append(os.sched_getaffinity(0))
        return x * 2

    everything = os.sched_getaffinity(0)
    SEEN.clear()
    compare(
        learner,
        "h",
        baseline,
        lambda i: (torch.full((4,), float(i + 1)),),
        grads=(False,),
        device="cpu",
        trials=3,
        warmup=1,
        min_sample_s=0.001,
        threads=1,
        rng=random.Random(0),
        sets=2,
    )
    first = next((i for i, mask in enumerate(SEEN) if len(mask) == 1), len(SEEN))
    assert first >= 8, "the untimed coverage (2 sets x 2 scales, both sides) compiles on every core"
    timed = SEEN[first:]
    assert len(timed) > 20 and all(len(mask) == 1 for mask in timed), "from the warm-up on, every call on one core"
    assert len({frozenset(mask) for mask in timed}) == 1, "and on the same core"
    assert os.sched_getaffinity(0) == everything


BURNERS = (
    "import subprocess, sys\n"
    "BURNERS = [subprocess.Popen([sys.executable, '-c', 'while True: pass']) for _ in range(2)]\n"
)


def test_a_timed_sample_may_use_only_the_cpu_time_of_the_cores_it_was_given() -> None:
    from grader.speed import check_cores

    check_cores(int(0.1e9), 0.1, 1)  # one core, busy throughout
    check_cores(int(0.2e9), 0.1, 2)
    with pytest.raises(AssertionError, match="2.0 cores' worth, where the check runs it on 1"):
        check_cores(int(0.2e9), 0.1, 1)


class _BusyElsewhere(LocalLearner):
    """A learner whose probes report two cores' worth of CPU time for each second of the judge's clock, as a helper
    process on a core of its own would add."""

    def __init__(self) -> None:
        super().__init__({}, "ex00", get_profile("smoke"))
        self.used_ns = 0

    def cpu_ns(self) -> int | None:
        return self.used_ns

    def ask(self, probe: str, args: dict, tensors: dict | None = None, what: str = "") -> dict:
        start = time.perf_counter()
        time.sleep(0.05)
        self.used_ns += int(2e9 * (time.perf_counter() - start))
        return {}


def test_every_timed_request_is_bounded_by_the_cores_it_was_pinned_to() -> None:
    """Session 36: exercises 4 and 6 time one request each (a cold stream, a cold capture) outside ``compare``, and
    had no CPU-time bound; ``time_once`` now applies it to any request timed on pinned cores."""
    from grader.speed import time_once

    learner = _BusyElsewhere()
    seconds, _ = time_once(learner, "ex00.anything", {}, cores=2)  # two cores pinned: two cores' worth is fair
    assert seconds >= 0.05
    with pytest.raises(AssertionError, match="cores' worth, where the check runs it on 1"):
        time_once(learner, "ex00.anything", {}, cores=1)
    time_once(learner, "ex00.anything", {}, cores=None)  # outside same_cores: nothing is compared


@needs_two_cores
def test_the_judge_counts_the_cpu_time_of_processes_a_worker_started(tmp_path) -> None:
    """Red team, session 33: a process the worker started, on a core of its own (it widened its CPU mask), ran half
    of each timed sample's calls, and exercise 2's slow scorer passed its speed check at 1.46x. The judge reads the
    CPU time of the worker's whole tree (its cgroup where it has one), which such a helper adds to."""
    from grader.learner import RemoteLearner
    from grader.runner import sandbox_report
    from grader.speed import check_cores
    from grader.worker_limits import Limits

    limits = Limits(memory_bytes=4 << 30, check_timeout_s=60)
    with RemoteLearner([BURNERS], "ex00", get_profile("smoke"), limits, report=sandbox_report("prefer"),
                       workdir=tmp_path) as learner:  # fmt: skip
        learner.start()
        assert not learner.problems, learner.problems
        time.sleep(0.5)  # the burners start
        before, start = learner.cpu_ns(), time.perf_counter()
        time.sleep(0.5)
        used, seconds = learner.cpu_ns() - before, time.perf_counter() - start
        # the worker itself sleeps: what was used is the burners' (on a busy machine, less than their two cores)
        assert used > 0.3 * seconds * 1e9, (used, seconds)
        with pytest.raises(AssertionError, match="cores' worth, where the check runs it on 1"):
            check_cores(used, used / 2e9, 1)  # as much CPU time in half the time: two cores' worth
