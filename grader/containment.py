"""The judge's hold on the processes learner code runs in: find them all, stop them, end them.

Learner processes are the grading workers and everything they start. Each worker is a *child subreaper*
(``PR_SET_CHILD_SUBREAPER``, which its seccomp filter then keeps it from undoing), so a process that learner
code starts and orphans (a double fork, ``setsid``, a daemon) is re-parented to the worker and stays in its
tree. The judge is a subreaper too: if a worker dies while its children live, they are re-parented to the
judge, which recognises them by the sandbox they carry (``NoNewPrivs`` and a seccomp filter in
``/proc/PID/status``).

``stopped()`` sends ``SIGSTOP`` to all of them, over and over until no new one appears, and ``SIGCONT``
afterwards: while the judge times its baseline, no learner thread or process can run, so none can slow it. It then
checks that the freeze held, since a process can resume itself (a POSIX timer that sends it ``SIGCONT``, with a
handler so the timer keeps firing) or fork faster than it is stopped: a stopped process uses no CPU time and
starts nothing and cannot end, so CPU time used inside the block, a process that was not there when it began, or
one that is gone when it ends, is learner code that ran (``FreezeBroken``). Where a worker has a cgroup of its own
(``grader.cgroups``), its group is frozen instead, which no signal undoes, and the group's CPU time, which counts
processes that ended, is checked too; its members are learner processes whoever their parent is.
``end_all()`` kills them and reaps the orphans.

``tree_usage()`` is what the judge polls, while it waits for an answer and between requests: the learner
processes' memory and how many threads and processes they run (``grader.learner`` stops a worker over either).

``same_cores()`` pins the judge and every learner thread to the same CPU cores while a speed check times them:
on a virtual machine one core can run 30-60% slower than another for seconds at a time (a busy neighbour on
the host's sibling thread), and a baseline and a candidate timed on different cores would compare the cores,
not the code.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import stat
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil

from grader import cgroups

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux only). True if it worked."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def _sandbox_fields(pid: int | str) -> tuple[bool, int] | None:
    """``(no new privileges, seccomp filters)`` of a process, or None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return fields.get("NoNewPrivs", "0").strip() == "1", int(fields.get("Seccomp_filters", "0").strip() or 0)


# the judge's own: in a container that runs everything with no new privileges and a seccomp profile (Kubernetes'
# RuntimeDefault with allowPrivilegeEscalation: false), every process the judge starts has them too, and only a
# filter more than the judge's marks learner code
_JUDGE_FILTERS = (_sandbox_fields("self") or (False, 0))[1]


def _sandboxed(pid: int) -> bool:
    """True for a process that carries the grader's sandbox (no new privileges, a seccomp filter the judge lacks)."""
    fields = _sandbox_fields(pid)
    return fields is not None and fields[0] and fields[1] > _JUDGE_FILTERS


# When each worker the judge knows of started, in clock ticks since boot (``start_ticks``), by pid: this judge's own
# (``track``, as each starts, before it runs learner code) and other judges' (``grader.machine_lock`` lists them).
_STARTED: dict[int, int] = {}


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (``/proc/PID/stat``'s ``starttime``, which psutil
    also uses to tell processes apart), or None once it is gone. Unlike a time of day it never moves with the
    system clock, so a process read twice gives the same number."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
        return int(stat_line[stat_line.rindex(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def track(pid: int, started: int | None = None) -> None:
    """Remember which process the worker ``pid`` is: the one that started at ``started`` (``start_ticks``), or the
    live one now. Every later look-up of ``pid`` (``root``) checks that it is still that process."""
    if (ticks := started if started is not None else start_ticks(pid)) is not None:
        _STARTED[pid] = ticks


def root(pid: int) -> psutil.Process | None:
    """The worker ``pid``, while it is the process that was ``track``-ed (a zombie not yet reaped still is), else
    None. Learner code can end its worker whenever it likes, and a process it left behind can run the machine's
    pid counter round (start and end threads) until the worker's number is the next to be given out: the number
    may then name another learner's worker, a judge or a compiler, which a look-up by number alone would freeze,
    sample or kill. A pid never tracked (a test's own child process) is taken as it is."""
    try:
        proc = psutil.Process(pid)
    except psutil.Error:
        return None
    started = _STARTED.get(pid)
    if started is not None and start_ticks(pid) != started:  # read after the lookup: it was this one all along
        return None
    return proc


def signal_worker(pid: int, sig: int) -> bool:
    """Send ``sig`` to the worker ``pid`` only if it is still that process (``root``), with no gap in which its
    number could pass to another: a pidfd names one process for good, so it is checked after it is opened and the
    signal then goes through it (where there are no pidfds, before Linux 5.3 or on another system, the check comes
    just before the signal). False if the worker is gone."""
    try:
        fd: int | None = os.pidfd_open(pid)
    except AttributeError:  # not Linux
        fd = None
    except OSError as exc:
        if exc.errno != errno.ENOSYS:  # gone
            return False
        fd = None  # Linux before 5.3
    try:
        if root(pid) is None:
            return False
        if fd is None:
            os.kill(pid, sig)
        else:
            signal.pidfd_send_signal(fd, sig)
        return True
    except OSError:
        return False
    finally:
        if fd is not None:
            os.close(fd)


def _groups_of(pids: set[int] | list[int]) -> dict[Path, cgroups.Group]:
    """The worker cgroups (``grader.cgroups``) the processes ``pids`` are in, by folder; a worker's only while it is
    the process that was tracked, checked after its group is read (``root``)."""
    found: dict[Path, cgroups.Group] = {}
    for pid in pids:
        group = cgroups.of(pid)
        if group is not None and root(pid) is not None:
            found.setdefault(group.main, group)
    return found


def learner_processes(worker_pids: set[int], adopted: bool = True) -> list[psutil.Process]:
    """Every live process learner code may control: the workers, their descendants, every process in a worker's
    cgroup (which none can leave, whoever its parent), and (``adopted``) orphans this judge adopted from a worker
    that died."""
    found: dict[int, psutil.Process] = {}
    for pid in worker_pids:
        with contextlib.suppress(psutil.Error):
            if (worker := root(pid)) is None:
                continue
            tree = {pid: worker} | {child.pid: child for child in worker.children(recursive=True)}
            if root(pid) is not None:  # still the worker after the walk: the tree found is its own
                found.update(tree)
    for group in _groups_of(worker_pids).values():
        for pid in group.members() - set(found):
            with contextlib.suppress(psutil.Error):
                found[pid] = psutil.Process(pid)
    if adopted:
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process().children(recursive=True):
                if child.pid not in found and _sandboxed(child.pid):
                    found[child.pid] = child
    return list(found.values())


def _signal_all(procs: list[psutil.Process], sig: int) -> None:
    for p in procs:
        with contextlib.suppress(psutil.Error, OSError):
            p.send_signal(sig)


# CPU time a frozen tree may still use: none once every thread shows as stopped (measured: exactly 0). Kept below
# what starting a process costs its parent (posix_spawn from Python: 350-450 us measured), so that a frozen
# process which resumes itself cannot start a helper that burns and ends before the freeze does unseen
FREEZE_SLACK_NS = 100_000
STOP_PASSES = 50  # passes of SIGSTOP over the tree; an honest tree needs one or two (a stopped process forks nothing)
STOP_WAIT_S = 2.0  # how long every thread of a stopped process may take to stop (a system call ends first)


class FreezeBroken(Exception):
    """Learner code ran while it was to be stopped (``stopped``); ``pids`` are the processes that did."""

    def __init__(self, message: str, pids: set[int]) -> None:
        super().__init__(message)
        self.pids = pids


def cpu_ns(pid: int) -> int | None:
    """CPU time of process ``pid`` (all its threads, live and ended) in nanoseconds, or None once it is gone:
    Linux's per-process CPU clock, which any process may read (``clock_getcpuclockid``)."""
    try:
        return time.clock_gettime_ns((~pid << 3) | 2)  # CPUCLOCK_SCHED of the whole thread group
    except OSError:
        return None


def _ran_while_stopped(
    worker_pids: set[int],
    done: dict[int, psutil.Process],
    before: dict[int, int | None],
    sandboxed_only: bool,
    outran: set[int],
    groups: dict[cgroups.Group, int | None],
) -> FreezeBroken | None:
    """Whether any learner process ran since ``before`` was read, with every one in ``done`` stopped; ``outran``:
    the processes the last stopping pass still found new (a chain of forks that outran every pass, whose links may
    have done their work and ended before the freeze did); ``groups``: the frozen worker cgroups, with the CPU time
    each had used when the freeze began (which counts processes that ended since)."""
    used, ended = {}, set()
    for pid, start in before.items():
        now = cpu_ns(pid)
        if start is not None and now is None:  # a stopped process cannot end itself: it ran (or was killed)
            ended.add(pid)
        elif start is not None and now is not None and now > start:
            used[pid] = now - start
    in_groups, ran_in = 0, set()
    for group, start in groups.items():
        now = group.cpu_ns()
        if start is not None and now is not None and now - start > FREEZE_SLACK_NS:
            in_groups += now - start
            ran_in |= group.members()
    cpu = max(sum(used.values()), in_groups)
    started = {
        p.pid
        for p in learner_processes(worker_pids, adopted=not sandboxed_only)
        if p.pid not in done and (not sandboxed_only or _sandboxed(p.pid))
    }
    if cpu <= FREEZE_SLACK_NS and not started and not outran and not ended:
        return None
    parts = []
    if cpu > FREEZE_SLACK_NS:
        where = "its cgroup" if in_groups >= sum(used.values()) else f"{len(used)} process(es)"
        parts.append(f"{cpu / 1e6:.1f} ms of CPU time in {where}")
    if started:
        parts.append(f"{len(started)} process(es) started")
    if ended:
        parts.append(f"{len(ended)} process(es) ended")
    if outran:
        parts.append(f"new processes still starting after {STOP_PASSES} passes that stopped every one they found")
    return FreezeBroken(
        "your code ran while the grader had stopped it to time the baseline ("
        + ", ".join(parts)
        + "): a process that resumes itself (a SIGCONT handler, a timer) or forks faster than it is stopped. "
        "A measurement it could disturb scores zero",
        set(used) | started | outran | ended | ran_in,
    )


def _kill_trees_of(culprits: set[int], worker_pids: set[int], done: dict[int, psutil.Process]) -> None:
    """SIGKILL the sandboxed processes in the tree (and the cgroup) of each worker that one of ``culprits`` belongs
    to. Only a worker frozen as that very process (``done``; ``is_running`` compares start times) is touched: another
    judge may have ended its worker meanwhile, and its pid may now be some other process's."""
    for worker_pid in worker_pids:
        proc = done.get(worker_pid)
        with contextlib.suppress(psutil.Error):
            if proc is None or not proc.is_running():
                continue
            group = cgroups.of(worker_pid)
            tree = [proc, *proc.children(recursive=True)]
            if culprits & ({p.pid for p in tree} | (group.members() if group else set())):
                if group is not None:
                    group.kill()
                _signal_all([p for p in tree if _sandboxed(p.pid)], signal.SIGKILL)


def _running_threads(pid: int) -> list[str]:
    """The threads of ``pid`` not (yet) stopped, each as ``name (tid, state)``; none once the process is gone."""
    found = []
    for tid in _threads_of(pid):
        try:
            stat_line = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            name = stat_line[stat_line.index("(") + 1 : stat_line.rindex(")")]
            state = stat_line[stat_line.rindex(")") + 1 :].split()[0]
        except (OSError, IndexError, ValueError):
            continue
        if state not in ("T", "t", "Z", "X"):
            found.append(f"{name} ({tid}, {state})")
    return found


def _all_threads_stopped(pid: int) -> bool:
    """True once every thread of ``pid`` is stopped or has exited (or the process is gone): a thread still inside a
    system call stops only when it leaves it, and until then its CPU time would count as learner code running."""
    return not _running_threads(pid)


@contextlib.contextmanager
def stopped(worker_pids: set[int], sandboxed_only: bool = False) -> Iterator[int]:
    """Learner processes frozen inside the block (yields how many), running again after it: a process in a worker
    cgroup by freezing its group (``grader.cgroups``), any other with SIGSTOP (SIGCONT after). With
    ``sandboxed_only`` (another judge's workers), only the trees of ``worker_pids``, and only sandboxed processes.

    If learner code ran inside the block anyway (see the module docstring), this judge's own workers raise
    ``FreezeBroken`` when the block ends; another judge's worker that did is killed with its tree, since its
    code disturbed this judge's measurement (its judge reports the death), and this block ends normally."""
    done: dict[int, psutil.Process] = {}
    signalled: list[psutil.Process] = []
    groups: dict[cgroups.Group, bool] = {}  # every group asked to freeze: whether the kernel froze it
    outran: set[int] = set()
    try:
        for _ in range(STOP_PASSES):  # until a pass finds nothing new: a frozen or stopped process starts nothing
            new = [
                p
                for p in learner_processes(worker_pids, adopted=not sandboxed_only)
                if p.pid not in done and (not sandboxed_only or _sandboxed(p.pid))
            ]
            if not new:
                break
            for group in _groups_of([p.pid for p in new]).values():
                if group not in groups:  # at once, processes forking meanwhile included, and past any signal
                    groups[group] = group.freeze()
            frozen = set().union(*(g.members() for g, ok in groups.items() if ok))
            signalled += [p for p in new if p.pid not in frozen]
            _signal_all([p for p in new if p.pid not in frozen], signal.SIGSTOP)
            done.update({p.pid: p for p in new})
        else:
            outran = {p.pid for p in new}
        deadline = time.monotonic() + STOP_WAIT_S
        for proc in signalled:  # wait until every thread has really stopped (the signal is delivered asynchronously)
            while not _all_threads_stopped(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.0005)
            if time.monotonic() >= deadline and (running := _running_threads(proc.pid)):
                print(  # a thread in an uninterruptible wait (a driver's, say): every freeze costs STOP_WAIT_S
                    f"grader: {len(running)} thread(s) of process {proc.pid} still running {STOP_WAIT_S:g} s after "
                    f"SIGSTOP: {', '.join(running[:5])}",
                    file=sys.stderr,
                    flush=True,
                )
        before = {pid: None if gone(pid) else cpu_ns(pid) for pid in done}  # a zombie's reaping is no run
        cpu_before = {group: group.cpu_ns() for group, ok in groups.items() if ok}
        broken = None
        try:
            yield len(done)
        finally:
            broken = _ran_while_stopped(worker_pids, done, before, sandboxed_only, outran, cpu_before)
            if broken is not None and sandboxed_only:
                _kill_trees_of(broken.pids, worker_pids, done)
    finally:  # whatever the check raised: never leave a learner, this judge's or another's, stopped
        _signal_all(signalled, signal.SIGCONT)
        for group in groups:
            group.thaw()
    if broken is not None and not sandboxed_only:
        raise broken


def timing_cores(threads: int) -> set[int]:
    """``threads`` cores of this process's allowed set, starting at the one it runs on now (so judges that run
    side by side, each on its own core, pick different ones)."""
    allowed = sorted(os.sched_getaffinity(0))
    try:
        here = allowed.index(psutil.Process().cpu_num())
    except (ValueError, psutil.Error, AttributeError):
        here = 0
    return {allowed[(here + i) % len(allowed)] for i in range(min(max(1, threads), len(allowed)))}


def _threads_of(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def _set_affinity(pids: list[int], cpus: set[int] | None, saved: dict[int, set[int]]) -> None:
    """Every thread of ``pids`` to ``cpus`` (or back to its process's mask in ``saved``); gone threads are skipped."""
    for pid in pids:
        mask = cpus if cpus is not None else saved.get(pid)
        if mask is None:
            continue
        for tid in _threads_of(pid):
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, mask)


@contextlib.contextmanager
def same_cores(
    worker_pids: set[int],
    cpus: set[int],
    hold: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> Iterator[None]:
    """This process and every learner process, all their threads, restricted to ``cpus`` inside the block and
    given back their masks after it. Linux only (elsewhere a no-op). The pinning happens inside ``hold()``
    (``grader.learner.RemoteLearner.frozen``: every learner process stopped), so no thread starts between the
    listing and the pinning with the wide mask of a parent not yet pinned. Learner code cannot widen its mask again
    where it is sandboxed (seccomp refuses ``sched_setaffinity``); where it is not, a speed check fails on the CPU
    time it used (``grader.speed.check_cores``)."""
    if not hasattr(os, "sched_setaffinity") or not Path("/proc/self/task").is_dir():
        yield
        return
    saved: dict[int, set[int]] = {}
    with hold():
        pids = [os.getpid()] + [p.pid for p in learner_processes(worker_pids)]
        for pid in pids:
            with contextlib.suppress(OSError):
                saved[pid] = os.sched_getaffinity(pid)
        _set_affinity(pids, cpus, saved)
    try:
        yield
    finally:
        _set_affinity(pids, None, saved)


def tree_usage(worker_pids: set[int]) -> tuple[int, int]:
    """``(resident bytes, tasks)`` of all learner processes, a task being a thread or a single-threaded process:
    what a fork or thread bomb grows, which shares one process's memory and so hides from the byte count."""
    rss = tasks = 0
    for p in learner_processes(worker_pids):
        with contextlib.suppress(psutil.Error):
            with p.oneshot():
                rss += p.memory_info().rss
                tasks += p.num_threads()
    return rss, tasks


def unlinked_bytes(worker_pids: set[int], device: int) -> int | None:
    """Bytes on disk ``device`` held by files the learner processes keep open after deleting them, which no walk of
    a folder finds (a file opened, unlinked and written on fills the disk all the same); None where a process's open
    files cannot be read, so that what it hides counts as much."""
    total, seen = 0, set()
    for p in learner_processes(worker_pids):
        try:
            fds = os.listdir(f"/proc/{p.pid}/fd")
        except FileNotFoundError:  # ended meanwhile
            continue
        except OSError:
            return None
        for fd in fds:
            try:
                st = os.stat(f"/proc/{p.pid}/fd/{fd}")  # the open file itself, deleted or not
            except FileNotFoundError:
                continue
            except OSError:
                return None
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 0 and st.st_dev == device and (key := st.st_ino) not in seen:
                seen.add(key)
                total += st.st_blocks * 512
    return total


def gone(pid: int) -> bool:
    """True if the worker ``pid`` has exited (a zombie not yet reaped counts as gone, and so does a number that now
    names another process: ``root``)."""
    try:
        worker = root(pid)
        return worker is None or worker.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def end_all(worker_pids: set[int]) -> None:
    """Kill every learner process (again until none is left) and reap the orphans the judge adopted."""
    for group in _groups_of(worker_pids).values():
        group.kill()
    for _ in range(50):
        procs = learner_processes(worker_pids)
        if not procs:
            break
        _signal_all(procs, signal.SIGKILL)
        psutil.wait_procs(procs, timeout=2)
    reap()


def reap() -> None:
    """Collect the exit status of adopted orphans that died (so they leave no zombies)."""
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process().children():
            with contextlib.suppress(ChildProcessError, OSError, psutil.Error):
                if child.status() == psutil.STATUS_ZOMBIE and _sandboxed(child.pid):
                    os.waitpid(child.pid, os.WNOHANG)
