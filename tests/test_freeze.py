"""The judge's freeze holds, or the judge knows it did not.

Red team, session 29: a POSIX timer that sent the worker SIGCONT every millisecond (with a handler, so the kernel
kept it firing) undid every SIGSTOP, and the worker's threads burned the judge's core while it timed its baseline:
exercise 6's listed wrong submission scored 2.04x and 2.27x against a required 2x (1.07x without the timer). On
this project's kernel such a timer dies at the first SIGSTOP that finds its signal pending, so whether it thaws a
freeze is a race; these tests resume the process from outside instead, which is what any such trick amounts to."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest
import torch

from coursekit.profile import get_profile
from grader import containment, speed
from grader.local_learner import LocalLearner
from grader.probing import Call, Reply, probe, stage_timed

# a process that works whenever it runs; with an argument, it starts a process that many seconds after it began
BUSY = r"""
import os, sys, time

fork_after_s = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
print("ready", flush=True)
start, forked = time.monotonic(), False
while True:
    if fork_after_s and not forked and time.monotonic() - start > fork_after_s:
        forked = True
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
"""

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's CPU clocks and /proc")


def _start(*args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", BUSY, *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        for p in [*psutil.Process(proc.pid).children(recursive=True), psutil.Process(proc.pid)]:
            p.kill()
    proc.wait()


def test_a_stopped_process_uses_no_cpu_time_and_the_freeze_ends_quietly() -> None:
    proc = _start()
    try:
        with containment.stopped({proc.pid}) as count:
            before = containment.cpu_ns(proc.pid)
            time.sleep(0.3)
            assert containment.cpu_ns(proc.pid) == before, "a stopped process used CPU time"
        assert count == 1
        time.sleep(0.1)
        assert psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED, "not resumed after the block"
    finally:
        _end(proc)


def test_a_process_that_runs_while_frozen_is_caught() -> None:
    proc = _start()
    try:
        with pytest.raises(containment.FreezeBroken, match="ran while the grader had stopped it") as caught:
            with containment.stopped({proc.pid}):
                os.kill(proc.pid, signal.SIGCONT)  # as a timer of its own would
                time.sleep(0.3)
        assert caught.value.pids == {proc.pid}
        assert "ms of CPU time in 1 process(es)" in str(caught.value), str(caught.value)
    finally:
        _end(proc)


def test_a_process_started_while_frozen_is_caught() -> None:
    """A fork chain outruns the stopping passes: what it leaves is a process the freeze did not find."""
    proc = _start("0.5")
    try:
        with pytest.raises(containment.FreezeBroken, match="1 process\\(es\\) started") as caught:
            with containment.stopped({proc.pid}):
                os.kill(proc.pid, signal.SIGCONT)
                time.sleep(1.5)
        assert len(caught.value.pids) == 2
    finally:
        _end(proc)


def test_a_process_that_runs_and_ends_while_frozen_is_caught() -> None:
    """Its CPU time ends with it (a child whose parent ignores SIGCHLD is reaped at once): that it is gone shows."""
    proc = _start()
    try:
        with pytest.raises(containment.FreezeBroken, match="1 process\\(es\\) ended"):
            with containment.stopped({proc.pid}):
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait(5)  # reaped: its CPU clock is gone
    finally:
        _end(proc)


def test_another_judges_worker_that_runs_while_frozen_is_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another judge's workers are frozen while this one times (``grader.machine_lock``): one that ran anyway is
    killed with its tree, since it disturbed this judge's measurement, and this judge's block ends normally."""
    proc = _start()
    monkeypatch.setattr(containment, "_sandboxed", lambda pid: True)  # no sandbox in this test: take it as one
    try:
        with containment.stopped({proc.pid}, sandboxed_only=True):
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(0.3)
        assert proc.wait(5) == -signal.SIGKILL
    finally:
        _end(proc)


def test_processes_still_starting_after_every_stopping_pass_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fork chain whose links outrun every pass may do its work and end before the freeze does, leaving neither
    CPU time nor a process to find then: that the last pass still found new processes is what shows it. With one
    pass allowed, any process found is such a one."""
    proc = _start()
    monkeypatch.setattr(containment, "STOP_PASSES", 1)
    try:
        with pytest.raises(containment.FreezeBroken, match="still starting after 1 passes"):
            with containment.stopped({proc.pid}):
                time.sleep(0.05)
    finally:
        _end(proc)


def test_a_zombie_reaped_during_the_freeze_is_no_run() -> None:
    """A worker that died just before the freeze is a zombie its parent may reap meanwhile: that is no learner
    code running."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.01)
    with containment.stopped({proc.pid}):
        proc.wait()  # reaped: its CPU clock is gone


def test_learner_code_is_told_from_a_judge_that_runs_sandboxed_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the container gives every process no new privileges and a seccomp filter, the judge's own children
    carry them too: only a filter more than the judge's own marks learner code."""
    monkeypatch.setattr(containment, "_sandbox_fields", lambda pid: (True, 1))
    monkeypatch.setattr(containment, "_JUDGE_FILTERS", 1)
    assert not containment._sandboxed(os.getpid())
    monkeypatch.setattr(containment, "_sandbox_fields", lambda pid: (True, 2))
    assert containment._sandboxed(os.getpid())


class _FreezeMarkingLearner(LocalLearner):
    """In-process probes, with ``frozen()`` marking the calls made inside it (nothing to stop in this process)."""

    inside = False

    @contextlib.contextmanager
    def frozen(self) -> Iterator[int]:
        _FreezeMarkingLearner.inside = True
        try:
            yield 0
        finally:
            _FreezeMarkingLearner.inside = False


def test_every_timed_baseline_call_runs_with_the_learner_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    """The call that sizes the baseline's samples included (red team, session 30: learner code that slowed it,
    unfrozen, would have shortened every baseline sample, and a short sample runs slower a call)."""
    frozen_at: list[bool] = []
    real = speed._time_local

    def recording(*args, **kwargs):
        frozen_at.append(_FreezeMarkingLearner.inside)
        return real(*args, **kwargs)

    monkeypatch.setattr(speed, "_time_local", recording)
    learner = _FreezeMarkingLearner({}, "ex01", get_profile("smoke"))
    learner.ask("test.stage_double", {"handle": "h"})
    warmup, trials = 2, 3
    speed.compare(
        learner,
        "h",
        lambda x: x * 2,
        lambda i: (torch.full((4,), float(i + 1)),),
        grads=(False,),
        device="cpu",
        trials=trials,
        warmup=warmup,
        min_sample_s=0.001,
        threads=1,
        rng=random.SystemRandom(),
        sets=2,
    )
    untimed = 1 + warmup  # the coverage of every input, then the warm-up calls
    assert len(frozen_at) == untimed + 1 + trials
    assert frozen_at[untimed:] == [True] * (1 + trials), "a timed baseline call ran with the learner free to run"


@probe("test.stage_double")
def _stage_double(call: Call) -> Reply:
    return stage_timed(call, call.arg("handle"), lambda x: x * 2)
