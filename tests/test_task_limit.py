"""A thread or fork bomb is stopped before it takes the machine's process ids from other workers and the judge: the
judge counts the threads and processes of a worker's tree (``Limits.max_tasks``) while it waits for an answer and,
with a watch thread, between requests, except while something is timed. A bomb inside a check is a case in
``tests/adversarial.py``, graded by ``tests/test_integrity.py``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coursekit.profile import get_profile
from grader import containment
from grader import learner as learner_module
from grader.learner import RemoteLearner
from grader.learner_failures import WorkerLost
from grader.runner import sandbox_report
from grader.worker_limits import MAX_TASKS_ENV, Limits, default_max_tasks


def _learner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, usage: list[tuple[int, int]]) -> RemoteLearner:
    """A learner whose worker tree reports ``usage[0]`` as ``(resident bytes, tasks)``."""
    monkeypatch.setattr(learner_module, "SEED_ROOT", tmp_path / "no-seed")
    monkeypatch.setattr(containment, "tree_usage", lambda pids: usage[0])
    limits = Limits(memory_bytes=1 << 30, check_timeout_s=10, max_tasks=64)
    learner = RemoteLearner([], "ex00", get_profile("smoke"), limits, report=sandbox_report("off"), workdir=tmp_path)
    learner._new_scratch()
    return learner


def test_a_worker_over_its_threads_and_processes_is_stopped_with_a_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    usage = [(100 << 20, 64)]
    learner = _learner(tmp_path, monkeypatch, usage)
    learner._check_limits()  # at the limit: still grading
    assert learner.peak_tasks == 64, "reports keep the most a poll found (worker_peak_tasks)"
    usage[0] = (100 << 20, 65)
    with pytest.raises(WorkerLost, match="ran 65 threads and processes at once, more than the 64"):
        learner._check_limits()
    usage[0] = (2 << 30, 10)
    with pytest.raises(WorkerLost, match="more than 1.0 GiB of memory"):
        learner._check_limits()


def test_the_default_leaves_room_for_every_core_and_can_be_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MAX_TASKS_ENV, raising=False)
    assert default_max_tasks() >= max(512, 4 * (os.cpu_count() or 1))
    monkeypatch.setenv(MAX_TASKS_ENV, "2048")
    assert default_max_tasks() == 2048 == Limits(memory_bytes=1, check_timeout_s=1).max_tasks


def test_this_process_tree_is_counted_by_its_threads() -> None:
    rss, tasks = containment.tree_usage({os.getpid()})
    assert rss > 0 and tasks >= len(os.listdir("/proc/self/task")) >= 1


# learner code that bombs a second after the notebook has loaded: between requests, while the judge is not waiting;
# the second bomb first stops its worker (from a child), which looks like a worker frozen for a speed check
BOMB_AFTER_LOAD = """
import os
import signal
import threading
import time


def _threads():
    threading.stack_size(64 * 1024)
    hold = threading.Event()
    for _ in range(3000):
        threading.Thread(target=hold.wait, daemon=True).start()
    hold.wait()


def _bomb():
    time.sleep(1.0)
    if not STOP_FIRST:
        _threads()
    elif os.fork() == 0:
        os.kill(os.getppid(), signal.SIGSTOP)
        _threads()


BOMB = threading.Thread(target=_bomb, daemon=True).start()
"""


@pytest.mark.slow
@pytest.mark.parametrize("stop_first", [False, True], ids=["threads", "worker stopped, then threads in a child"])
def test_a_bomb_between_requests_is_stopped_and_the_next_request_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_first: bool
) -> None:
    monkeypatch.setattr(learner_module, "SEED_ROOT", tmp_path / "no-seed")
    limits = Limits(memory_bytes=4 << 30, check_timeout_s=30, max_tasks=200)
    cells = [f"STOP_FIRST = {stop_first}\n" + BOMB_AFTER_LOAD]
    report = sandbox_report("prefer")
    with RemoteLearner(cells, "ex00", get_profile("smoke"), limits, report=report, workdir=tmp_path) as learner:
        learner.start()
        worker = learner._worker
        deadline = time.monotonic() + 30
        while worker.proc.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not worker.proc.is_alive(), "a worker bombing between requests ran on until the next one"
        assert learner.peak_tasks > 200
        assert "threads and processes at once, more than the 200" in (learner.stop_reason() or "")
        with pytest.raises(WorkerLost, match="threads and processes at once, more than the 200"):
            learner.ask("any.probe", {})


@pytest.mark.slow
def test_a_bomb_is_left_alone_inside_quiet_and_stopped_as_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """quiet() holds every timed region; back-to-back timed samples can hold it across every tick of the watch, so
    the poll it skipped runs when the outermost quiet() ends, outside any clock."""
    monkeypatch.setattr(learner_module, "SEED_ROOT", tmp_path / "no-seed")
    limits = Limits(memory_bytes=4 << 30, check_timeout_s=30, max_tasks=200)
    cells = ["STOP_FIRST = False\n" + BOMB_AFTER_LOAD]
    report = sandbox_report("prefer")
    with RemoteLearner(cells, "ex00", get_profile("smoke"), limits, report=report, workdir=tmp_path) as learner:
        learner.start()
        worker = learner._worker
        with pytest.raises(WorkerLost, match="threads and processes at once, more than the 200"):
            with learner.quiet():
                with learner.quiet():  # nested: only the outermost end polls
                    # until the bomb is past the limit: it starts a second after loading, and on a busy machine
                    # (beside the integrity tests) it had 15 threads 3 s after loading, not 200
                    deadline = time.monotonic() + 30
                    while containment.tree_usage({worker.proc.pid})[1] <= 200 and time.monotonic() < deadline:
                        time.sleep(0.1)
                    time.sleep(0.5)  # two ticks of the watch more, which quiet() holds off
                assert worker.proc.is_alive() and containment.tree_usage({worker.proc.pid})[1] > 200
        assert containment.gone(worker.proc.pid) or not worker.proc.is_alive()


@pytest.mark.slow
def test_the_next_check_fails_with_the_reason_the_watch_stopped_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Between checks the runner starts a new worker for a dead one: the check after the stop says why, not the
    restart's clean slate."""
    from grader.runner import grade_notebook
    from tests.submissions import ROOT

    reasons = ["your code ran 999 threads and processes at once (a stand-in for the watch's reason)"]
    monkeypatch.setattr(RemoteLearner, "stop_reason", lambda self: reasons.pop() if reasons else None)
    notebook = ROOT / "solutions" / "00_orientation.ipynb"
    ids = ["ex00.capture.graph", "ex00.recompiles.count"]
    grade = grade_notebook(notebook, "ex00", get_profile("smoke"), 3, check_ids=ids, progress=False)
    first, second = grade.results
    assert not first.passed and "999 threads" in first.message
    assert second.passed, second.message


OTHER_JUDGE_TIMING = """
import sys, time
from grader import machine_lock
with machine_lock.checking(exclusive=True):
    print("timing", flush=True)
    time.sleep(60)
"""


def test_the_watch_polls_unless_another_judge_is_timing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It asks the machine lock, not the worker's state: learner code can stop its own worker to look frozen."""
    from grader import machine_lock

    monkeypatch.setenv(machine_lock.DIR_ENV, str(tmp_path))
    monkeypatch.delenv(machine_lock.LOCK_ENV, raising=False)
    with machine_lock.unless_timing() as free:
        assert free
    with machine_lock.checking(exclusive=False), machine_lock.unless_timing() as free:
        assert free, "a judge running an untimed check does not stop the watch"
    with machine_lock.checking(exclusive=True), machine_lock.unless_timing() as free:
        assert free, "this judge's own speed check does not: its timed regions hold RemoteLearner.quiet()"
    other = subprocess.Popen(  # another judge, running a speed check
        [sys.executable, "-c", OTHER_JUDGE_TIMING],
        env={**os.environ, machine_lock.DIR_ENV: str(tmp_path)},
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout.readline().strip() == "timing"
        with machine_lock.unless_timing() as free:
            assert not free, "another judge's speed check stops it"
    finally:
        other.kill()
        other.wait()
    monkeypatch.setenv(machine_lock.LOCK_ENV, "off")
    with machine_lock.unless_timing() as free:
        assert free


def _sandboxed_learner(cell: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RemoteLearner:
    """A learner of exercise 0 whose notebook is ``cell``, its worker sandboxed as in a grading (30 s a check)."""
    monkeypatch.setattr(learner_module, "SEED_ROOT", tmp_path / "no-seed")
    limits, report = Limits(memory_bytes=4 << 30, check_timeout_s=30), sandbox_report("prefer")
    return RemoteLearner([cell], "ex00", get_profile("smoke"), limits, report=report, workdir=tmp_path)


# learner code whose worker dies a second after loading, leaving a process behind: an orphan the judge adopts, which
# no other judge's speed check would freeze (they freeze the trees of live workers)
ORPHAN_AFTER_LOAD = """
import os
import threading
import time


def _leave():
    time.sleep(1.0)
    if os.fork() == 0:
        time.sleep(600)
    os._exit(0)


LEAVE = threading.Thread(target=_leave, daemon=True).start()
"""


@pytest.mark.slow
def test_a_dead_workers_orphans_are_ended_without_waiting_for_a_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _sandboxed_learner(ORPHAN_AFTER_LOAD, tmp_path, monkeypatch) as learner:
        learner.start()
        worker = learner._worker
        deadline = time.monotonic() + 30
        while not containment.gone(worker.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert containment.gone(worker.proc.pid)
        deadline = time.monotonic() + 5
        while containment.learner_processes(set()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not containment.learner_processes(set()), "the orphan of a dead worker lived on until the next request"


def test_a_workers_number_that_names_another_process_now_is_left_alone(tmp_path: Path) -> None:
    """Learner code can end its worker whenever it likes, and a process it leaves can run the machine's pid counter
    round until the worker's number is the next one given out (a red team, session 42): the judge, which sampled,
    froze and killed its worker by number, would then have sampled, frozen or killed whatever took the number,
    another learner's worker or judge. Every look-up now checks the process is the one that started under that
    number (``containment.track``, ``root``). Here a process stands for the one that took the number: it is recorded
    as a worker that started 500 clock ticks before it did."""
    import errno
    import signal

    import psutil

    from grader import stuck

    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        containment.track(victim.pid, containment.start_ticks(victim.pid) - 500)  # clock ticks: 5 s at 100 a second
        assert containment.root(victim.pid) is None and containment.gone(victim.pid)
        assert containment.learner_processes({victim.pid}, adopted=False) == []
        assert containment.tree_usage({victim.pid}) == (0, 0)
        assert not containment.signal_worker(victim.pid, signal.SIGUSR1)  # its default action would end it
        log = tmp_path / "worker.log"
        log.write_text("")
        assert stuck.stack_of(victim.pid, log, wait_s=0.2) == ""
        with containment.stopped({victim.pid}) as count:
            assert count == 0 and psutil.Process(victim.pid).status() != psutil.STATUS_STOPPED
        containment.end_all({victim.pid})
        assert victim.poll() is None, "the process that took a dead worker's number was killed"
        containment.track(victim.pid)  # recorded as it is: it is the worker now, and every look-up finds it
        assert containment.root(victim.pid) is not None and not containment.gone(victim.pid)
        assert containment.signal_worker(victim.pid, signal.SIGCONT), "through a pidfd"
        with pytest.MonkeyPatch.context() as mp:  # Linux before 5.3: checked, then a plain kill
            mp.setattr(os, "pidfd_open", lambda pid: (_ for _ in ()).throw(OSError(errno.ENOSYS, "no pidfds")))
            assert containment.signal_worker(victim.pid, signal.SIGTERM) and victim.wait(5) == -signal.SIGTERM
    finally:
        victim.kill()
        victim.wait()


# learner code that ends its worker at once while a process it forked keeps the worker's end of the judge's channel
# open: no end of file reaches the judge, which waited out the whole limit (then signalled and killed by the
# worker's number, which by then the red team's process had handed to another)
EXIT_HOLDING_THE_CHANNEL = """
import os
import time


def _leave():
    if os.fork() == 0:
        time.sleep(600)
    os._exit(0)


LEAVE = _leave()
"""


@pytest.mark.slow
def test_a_worker_that_ends_while_a_process_it_left_holds_the_channel_fails_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _sandboxed_learner(EXIT_HOLDING_THE_CHANNEL, tmp_path, monkeypatch) as learner:
        started = time.monotonic()
        with pytest.raises(WorkerLost, match="exited with code 0"):
            learner.start()
        assert time.monotonic() - started < 20, "it waited for the load's time-out instead"
        assert not containment.learner_processes(set()), "the process it left lived on"


def test_another_judges_worker_counts_only_while_its_number_names_the_process_that_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A judge freezes other judges' workers while it times (``machine_lock``): each is listed with when it started,
    in clock ticks since boot, and one whose number now names a process that started at another time is not one."""
    from grader import machine_lock

    monkeypatch.setenv(machine_lock.DIR_ENV, str(tmp_path))
    monkeypatch.delenv(machine_lock.LOCK_ENV, raising=False)
    workers = tmp_path / "workers"
    workers.mkdir()
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = containment.start_ticks(worker.pid)
        (workers / str(worker.pid)).write_text(f"{os.getppid()} {started}")  # another judge's (a live one)
        assert machine_lock._other_workers() == {worker.pid} and containment.root(worker.pid) is not None
        (workers / str(worker.pid)).write_text(f"{os.getppid()} {started - 500}")  # the worker that had the number
        assert machine_lock._other_workers() == set()
    finally:
        worker.kill()
        worker.wait()
