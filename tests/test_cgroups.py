"""A worker's cgroup (``grader.cgroups``), where the judge may create one: the freeze no signal undoes, CPU time that
processes which ended still count in, a kill nothing outruns, a task bound the kernel keeps, and a group learner code
cannot leave or change. Skipped, with the reason, where this machine gives no cgroup (an ordinary user, most
containers); ``tests/test_freeze.py`` covers the process-tree freeze every machine has."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coursekit.profile import get_profile
from grader import cgroups, containment
from grader import learner as learner_module
from grader.learner import RemoteLearner
from grader.runner import sandbox_report
from grader.worker_limits import Limits
from tests.test_sandbox import in_sandbox, needs_sandbox

PROBE = cgroups.create(64)
if PROBE is not None:
    PROBE.remove()
needs_cgroups = pytest.mark.skipif(PROBE is None, reason=cgroups.describe())

BURN = "import time\nwhile True:\n    pass\n"


@pytest.fixture
def group() -> Iterator[cgroups.Group]:
    made = cgroups.create(64)
    assert made is not None
    yield made
    made.remove()


def _spawn(code: str, group: cgroups.Group, **popen) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", code], **popen)
    group.add(proc.pid)
    return proc


def _wait_stopped(pid: int) -> None:
    """Until ``pid``, which stops itself at start, has (so it runs again only once it is in the group)."""
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        time.sleep(0.001)


def _cpu(pid: int) -> int:
    return containment.cpu_ns(pid) or 0


@needs_cgroups
def test_a_frozen_group_stays_frozen_whatever_signal_it_gets(group: cgroups.Group) -> None:
    proc = _spawn(BURN, group)
    try:
        assert cgroups.of(proc.pid) == group, "the group is found from any process in it"
        with containment.stopped({proc.pid}) as count:
            assert count == 1
            start = _cpu(proc.pid)
            os.kill(proc.pid, signal.SIGCONT)  # what a self-resuming timer sends: it undoes SIGSTOP, not a freeze
            time.sleep(0.2)
            assert _cpu(proc.pid) == start, "a frozen process ran"
        time.sleep(0.1)
        assert _cpu(proc.pid) > start, "the freeze did not end with the block"
    finally:
        proc.kill()
        proc.wait()


@needs_cgroups
def test_a_process_that_ran_and_ended_inside_the_freeze_still_counts(group: cgroups.Group) -> None:
    """A helper started and ended inside one freeze leaves no process and no per-process clock behind; the group's
    CPU time keeps it. (The helper is moved in from outside: learner code would have to thaw first, which the test
    above shows it cannot.)"""
    worker = _spawn("import time\ntime.sleep(60)\n", group)
    try:
        with pytest.raises(containment.FreezeBroken, match=r"ms of CPU time in its cgroup"):
            with containment.stopped({worker.pid}):
                helper = subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        "import os, time\nos.kill(os.getpid(), 19)\nt = time.process_time()\n"
                        "while time.process_time() - t < 0.05:\n    pass\n",
                    ]
                )
                _wait_stopped(helper.pid)
                group.thaw()
                group.add(helper.pid)
                os.kill(helper.pid, signal.SIGCONT)
                helper.wait(10)
                assert cgroups.of(worker.pid) == group and helper.returncode == 0
    finally:
        worker.kill()
        worker.wait()


@needs_cgroups
def test_every_process_in_the_group_is_found_and_ended_whoever_its_parent(group: cgroups.Group) -> None:
    worker = _spawn("import time\ntime.sleep(60)\n", group)
    stray = _spawn("import time\ntime.sleep(60)\n", group)  # in the group, not in the worker's tree
    try:
        assert stray.pid in {p.pid for p in containment.learner_processes({worker.pid}, adopted=False)}
        containment.end_all({worker.pid})  # psutil reaps them: Popen's own return code is lost
        worker.wait(5), stray.wait(5)
        assert not group.members(), "a process in the group outlived its worker's end"
    finally:
        for proc in (worker, stray):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@needs_cgroups
def test_the_kernel_bounds_threads_and_processes(group: cgroups.Group) -> None:
    if group.pids is None:
        pytest.skip("no pids controller to create a group in: the task cap is polled only")
    bomb = _spawn(
        "import os, threading, time\nos.kill(os.getpid(), 19)\nn = 1\ntry:\n    while True:\n"
        "        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n        n += 1\n"
        "except RuntimeError:\n    print(n)\n",
        group,
        stdout=subprocess.PIPE,
        text=True,
    )
    _wait_stopped(bomb.pid)
    os.kill(bomb.pid, signal.SIGCONT)
    try:
        out, _ = bomb.communicate(timeout=60)
    finally:
        group.kill()
    bound = 64 + cgroups.PIDS_MARGIN
    assert (group.pids / "pids.max").read_text().strip() == str(bound)
    assert 64 < int(out) <= bound, f"the bomb ran {out.strip()} threads; the kernel's bound is {bound}"


@needs_cgroups
def test_a_removed_group_leaves_nothing_behind(group: cgroups.Group) -> None:
    proc = _spawn("import time\ntime.sleep(60)\n", group)
    group.remove()
    assert proc.wait(5) == -signal.SIGKILL
    assert not group.main.exists() and (group.pids is None or not group.pids.exists())


@needs_cgroups
def test_a_dead_judges_groups_are_swept(tmp_path: Path) -> None:
    judge = subprocess.Popen([sys.executable, "-c", "pass"])
    judge.wait()
    made = cgroups.create(8)
    assert made is not None
    stale = made.main.parent / f"{cgroups.PREFIX}{cgroups._pid_namespace()}-{judge.pid}-1"
    elsewhere = made.main.parent / f"{cgroups.PREFIX}1-{judge.pid}-1"  # a judge in another pid namespace
    stale.mkdir()
    elsewhere.mkdir()
    try:
        again = cgroups.create(8)
        assert again is not None and not stale.exists(), "a group whose judge died was left behind"
        assert elsewhere.exists(), "a pid from another namespace says nothing of whether its judge lives here"
        again.remove()
    finally:
        made.remove()
        for group in (stale, elsewhere):
            if group.exists():
                group.rmdir()


@needs_cgroups
@needs_sandbox
def test_learner_code_cannot_leave_thaw_or_widen_its_group(group: cgroups.Group) -> None:
    parent = group.main.parent
    results = in_sandbox(
        {
            "leave its group": lambda: (parent / "cgroup.procs").write_text(str(os.getpid())),
            "thaw its group": lambda: (group.main / "cgroup.freeze").write_text("0"),
            "make a group": lambda: (group.main / "mine").mkdir(),
            "raise its task bound": lambda: (
                (group.pids or group.main / "pids.max").joinpath("pids.max").write_text("max")
            ),
        }
    )
    for name in ("leave its group", "thaw its group", "make a group", "raise its task bound"):
        assert results[name].startswith("blocked"), (name, results[name])


@needs_cgroups
def test_a_grading_worker_runs_in_a_group_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(learner_module, "SEED_ROOT", tmp_path / "no-seed")
    limits = Limits(memory_bytes=1 << 30, check_timeout_s=60, max_tasks=100)
    with RemoteLearner([], "ex00", get_profile("smoke"), limits, report=sandbox_report("off"), workdir=tmp_path) as lr:
        lr.start()
        worker = lr._worker
        assert worker is not None and worker.group is not None
        assert cgroups.of(worker.proc.pid) == worker.group
        assert worker.group.members() == {worker.proc.pid}
        if worker.group.pids is not None:
            assert (worker.group.pids / "pids.max").read_text().strip() == str(100 + cgroups.PIDS_MARGIN)
        made = worker.group
    assert not made.main.exists(), "the group outlived its worker"


def test_switched_off_it_makes_no_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cgroups.ENV, "off")
    assert cgroups.create(8) is None and cgroups.of(os.getpid()) is None
    assert "switched off" in cgroups.describe()


def test_a_freeze_the_kernel_does_not_confirm_is_not_asked_again(tmp_path, monkeypatch, capsys) -> None:
    """A group whose ``frozen`` event never comes (a thread in an uninterruptible wait, say) costs the wait once,
    says so on stderr, and is stopped with SIGSTOP from then on (a review, session 39: on a GPU every freeze of the
    15-60 a speed check makes would otherwise wait the full time, silently)."""
    monkeypatch.setattr(cgroups, "FREEZE_WAIT_S", 0.01)
    monkeypatch.setattr(cgroups, "UNCONFIRMED", set())
    (tmp_path / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    group = cgroups.Group(tmp_path)
    assert group.freeze() is False
    assert (tmp_path / "cgroup.freeze").read_text() == "1"
    assert "did not confirm the freeze" in capsys.readouterr().err
    (tmp_path / "cgroup.freeze").write_text("0")
    assert group.freeze() is False and (tmp_path / "cgroup.freeze").read_text() == "0"  # not asked again


def test_running_threads_names_what_a_stop_still_waits_for() -> None:
    """``containment._running_threads`` lists a running process's threads by name and state, and none once stopped."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        assert any(", R)" in t or ", S)" in t for t in containment._running_threads(proc.pid))
        proc.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 2
        while containment._running_threads(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert containment._running_threads(proc.pid) == []
    finally:
        proc.kill()
        proc.wait()
