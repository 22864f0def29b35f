"""How a check reaches learner code: ``learner.ask(probe, args, tensors)`` returns what a probe observed.

Two learners implement the same interface:

* ``RemoteLearner``, the grade: the notebook's definitions live in a sandboxed worker process
  (``grader.worker``), started from a fork server that imported torch once. The judge (this process)
  never runs learner code. It sends a request, waits for exactly one answer with a deadline, and parses the
  answer with ``grader.protocol`` (no pickle). Caps on memory, threads and processes and a disk floor are
  watched while it waits and, by a watch thread, between requests. A worker that dies, hangs, grows too large
  or breaks the protocol is ended with everything it started; the next check gets a fresh worker. While the
  judge times its own baseline, ``frozen()`` holds every learner process stopped.
* ``LocalLearner`` (``grader.local_learner``), the learner's own feedback in a notebook: probes run in the same
  kernel. It is never a grade.

What a worker may use is in ``grader.worker_limits``, how it starts in ``grader.worker_start``, and what a failure
raises in ``grader.learner_failures``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from coursekit.profile import Profile
from grader import cgroups, containment, machine_lock, sandbox, stuck
from grader.learner_failures import WorkerLost, explain
from grader.protocol import Answer, Deadline, ProtocolError, clip, pack, readable, recv_frame, send_frame, unpack
from grader.worker_limits import Limits, disk_floor, filled, log_bytes, scratch_bytes
from grader.worker_start import ROOT, SECRET_ENV, main_not_imported, policy_for, scrubbed_environ, worker_context

LOAD_TIMEOUT_S = 120.0
# a notebook whose worker once ran out of time at a loop (or line): a later request found there, running it or
# tracing it, at every sample from SAME_PLACE_AFTER_S on (SAME_PLACE_SAMPLES samples, SAME_PLACE_EVERY_S apart) is
# stopped rather than waiting out its own limit too. Input that never reaches the loop grades as usual; only such a
# notebook is sampled (a sample interrupts the worker for a moment)
SAME_PLACE_AFTER_S, SAME_PLACE_EVERY_S, SAME_PLACE_SAMPLES = 30.0, 10.0, 3
WATCH_INTERVAL_S = 0.25  # how often the judge checks a worker's limits between requests (as while it waits)
SEED_ROOT = ROOT / ".cache" / "grader-seed"  # compiled kernels from grading the reference solutions, every exercise
SEED_SKIP = ("fxgraph", "aotautograd", "locks")  # cached graphs carry the source lines that compiled them


def _merge_into(source: Path, target: Path) -> None:
    """Copy the files of ``source`` missing from ``target``, each written whole (a copy, then a rename), so a worker
    seeding its scratch from ``target`` at the same moment never loads half a kernel. Cache entries are named by
    their content's hash: a file already there is the same file."""
    for folder, dirs, files in os.walk(source):
        dirs[:] = [d for d in dirs if d not in SEED_SKIP and not d.startswith("tmp")]
        here = target / Path(folder).relative_to(source)
        for name in files:
            if (here / name).exists():
                continue
            here.mkdir(parents=True, exist_ok=True)
            partial = here / f".{name}.{os.getpid()}.partial"
            shutil.copy2(Path(folder) / name, partial)
            os.replace(partial, here / name)


def _end(worker: _Worker) -> None:
    """Kill everything the worker started: its cgroup, known since it started (the number it had may name another
    process once it is gone), then its tree and the orphans this judge adopted (``containment.end_all``)."""
    if worker.group is not None:
        worker.group.kill()
    containment.end_all({worker.proc.pid} if worker.proc.pid else set())


def _death(exitcode: int | None) -> str:
    import signal

    if exitcode is not None and exitcode < 0:
        try:
            return f"was killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode} (sys.exit or os._exit in your code?)"


@dataclass
class _Worker:
    proc: Any
    conn: Any
    log: Path
    scratch: Path | None = None  # its scratch folder, and the free disk and the folder's bytes when it was made
    disk_start: tuple[int, int] = (0, 0)  # (the floor is ``disk_floor`` of the first; ``filled`` reads both)
    stopped_because: str | None = None  # why the watch ended it between requests, for the next request to say
    watch_done: threading.Event = field(default_factory=threading.Event)
    group: cgroups.Group | None = None  # its cgroup, where the judge may make one (``grader.cgroups``)


class RemoteLearner:
    """The notebook's definitions in a sandboxed worker process; see the module docstring."""

    def __init__(
        self,
        cells: list[str],
        exercise: str,
        profile: Profile,
        limits: Limits,
        *,
        report: sandbox.Report,
        workdir: Path,
    ) -> None:
        self.cells, self.exercise, self.profile, self.limits = cells, exercise, profile, limits
        self.report = report
        self.workdir = workdir
        self.problems: list[str] = []
        self.deadline = float("inf")
        self.needs: tuple[str, ...] | None = None  # the running check's needs (set by grader.results.run_check)
        self.check_id: str | None = None  # the running check (set there too), for messages
        self._hung_at: dict[tuple, str] = {}  # where a request ran out of time (grader.stuck.place) -> its check
        self._worker: _Worker | None = None
        self._next_id = 0
        self._starts = 0
        self._scratch: Path | None = None
        self._disk_start = (0, 0)  # free bytes, and the scratch folder's bytes once seeded (``disk_floor``, ``filled``)
        self._quiet = threading.RLock()  # held while anything is timed or asked: the watch never polls then
        self._quiet_depth = 0  # how deep the main thread is in quiet(), frozen() and requests
        self._last_poll = 0.0  # when a poll last ran (the watch's, the wait loop's, or an overdue one)
        self._watch_failed = False
        self._lifecycle = threading.Lock()  # a watch's poll and kill never overlap a worker's end (close_worker)
        self.peak_tasks = 0  # the most threads and processes a poll found (the cap's margin, in reports)
        self.local = False
        containment.become_subreaper()

    # ------------------------------------------------------------------ lifecycle

    def _new_scratch(self, seeded: bool = True) -> Path:
        """A new, private scratch folder; unless ``seeded`` is False, its compile caches start as a copy of the
        kernels compiled while reference solutions were graded (``SEED_ROOT``, see ``harvest``). Unseeded, only
        Inductor's precompiled C++ header is copied: a compile timed cold then compares with the judge's, which
        keeps that header too."""
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
        self._scratch = Path(tempfile.mkdtemp(prefix="scratch-", dir=self.workdir))
        free = shutil.disk_usage(self._scratch).free
        floor = disk_floor(free, self.limits.min_free_disk)
        if free < self.limits.min_free_disk:
            print(
                f"grader: only {free / 1024**2:.0f} MiB free on the disk of {self.workdir}: learner code may write "
                f"{(free - floor) / 1024**2:.0f} MiB before it is stopped",
                file=sys.stderr,
            )
        source, target = (SEED_ROOT, self._scratch) if seeded else (SEED_ROOT / "tmp", self._scratch / "tmp")
        if source.is_dir():  # unseeded (a check that times compiling) still gets the precompiled header, as the judge
            shutil.copytree(source, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".*.partial"))
        self._disk_start = (free, scratch_bytes(self._scratch) or 0)
        return self._scratch

    def harvest(self) -> None:
        """Keep the kernels this worker compiled as the seed for later workers, of every exercise. Only for a
        trusted notebook (a reference solution): a seed's compiled kernels are loaded by other learners' workers.
        Cached graphs are left out, since they carry the source lines that compiled them. One seed serves every
        exercise: Inductor's precompiled header (about 150 MB, 6-9 s of g++ on a 2-core CPU) and its check of the
        CPU's vector instructions depend on the compiler and its flags, not on the exercise, so the first reference
        graded builds them for all; a kernel is found by the hash of its source, so another exercise's is never
        loaded by mistake."""
        if self._scratch is None:
            return
        # the compile caches, and Inductor's precompiled C++ header (kept under TMPDIR, whatever the cache dir)
        kept = [
            "inductor",
            "triton",
            *(str(p.relative_to(self._scratch)) for p in self._scratch.glob("tmp/torchinductor_*/precompiled_headers")),
        ]
        for name in kept:
            if (self._scratch / name).is_dir():
                _merge_into(self._scratch / name, SEED_ROOT / name)

    def start(self, fresh: bool = False) -> None:
        """Start a worker and load the notebook into it; ``fresh`` also empties its scratch (compile caches)."""
        self.close_worker()
        scratch = self._new_scratch(seeded=not fresh) if fresh or self._scratch is None else self._scratch
        self._starts += 1
        for old in self.workdir.glob("worker-*.log"):  # read already: a worker that died has said why
            old.unlink(missing_ok=True)
        log = self.workdir / f"worker-{self._starts}.log"
        config = {
            "scratch": str(scratch),
            "log": str(log),
            "profile": self.profile.name,
            "device": self.profile.device,
            "environ": {k: v for k, v in os.environ.items() if not SECRET_ENV.search(k)},
            "data_limit": self.limits.memory_bytes if self.profile.device_class == "cpu" else None,
            "policy": {
                k: ([str(p) for p in v] if isinstance(v, list) else str(v))
                for k, v in vars(policy_for(scratch, self.profile.device)).items()
            },
            "sandbox": {k: v for k, v in vars(self.report).items()},
        }
        ctx = worker_context()
        parent, child = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=_serve, args=(child, config), daemon=True)
        with scrubbed_environ(), main_not_imported():
            proc.start()
        child.close()
        containment.track(proc.pid)  # before any learner code: which process this number names (containment.root)
        os.set_blocking(parent.fileno(), False)
        self._worker = _Worker(proc, parent, log, scratch, self._disk_start, group=self._group_for(proc.pid))
        machine_lock.register_worker(proc.pid)
        threading.Thread(target=self._watch, args=(self._worker,), daemon=True).start()
        saved, self.deadline = self.deadline, time.monotonic() + LOAD_TIMEOUT_S
        try:
            answer = self._request({"op": "load", "cells": self.cells}, what="loading the notebook")
        finally:
            self.deadline = saved
        self.problems = [clip(p, 500) for p in answer.strings("problems")]

    def _group_for(self, pid: int) -> cgroups.Group | None:
        """A cgroup of its own for the new worker ``pid``, before it runs any learner code; None where none can be
        made (the process tree then does all the work)."""
        group = cgroups.create(self.limits.max_tasks)
        if group is None:
            return None
        try:
            return group.add(pid)
        except OSError as exc:
            group.remove()  # empty: the worker did not move
            print(f"grader: could not move the worker into its cgroup ({exc}); grading without one", file=sys.stderr)
            return None

    @property
    def alive(self) -> bool:
        return self._worker is not None and self._worker.proc.is_alive()

    def pids(self) -> set[int]:
        return {self._worker.proc.pid} if self._worker is not None and self._worker.proc.pid else set()

    def cpu_ns(self) -> int | None:
        """CPU time the worker and every process it started have used, in nanoseconds: its cgroup's (ended processes
        included) where it has one, else the live processes' own clocks; None where neither can be read."""
        worker = self._worker
        if worker is None:
            return None
        if worker.group is not None and (used := worker.group.cpu_ns()) is not None:
            return used
        clocks = [containment.cpu_ns(p.pid) for p in containment.learner_processes(self.pids())]
        return sum(c for c in clocks if c is not None) if clocks else None

    def close_worker(self) -> None:
        """End the worker and everything it started."""
        if self._worker is None:
            return
        with self._lifecycle:
            worker, self._worker = self._worker, None
            worker.watch_done.set()
        machine_lock.unregister_worker(worker.proc.pid)
        _end(worker)
        with contextlib.suppress(Exception):
            worker.proc.join(2)
        if worker.group is not None:
            worker.group.remove()
        with contextlib.suppress(Exception):
            worker.conn.close()

    def close(self) -> None:
        self.close_worker()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def __enter__(self) -> RemoteLearner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ requests

    def _tail(self) -> str:
        """The end of the worker's log: only its last bytes are read, since learner code may have written up to the
        file-size limit (hundreds of MiB) to it."""
        log = self._worker.log if self._worker else None
        if not (log and log.exists()):
            return ""
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            text = f.read().decode(errors="replace")
        return clip(text[-600:].strip(), 600)

    def _lost(self, message: str) -> WorkerLost:
        self.close_worker()
        return WorkerLost(message)

    def _over_limits(self, pids: set[int], scratch: Path | None, start: tuple[int, int] = (0, 0)) -> str | None:
        """Why the learner processes of the workers ``pids`` must be stopped, or None: too many threads or
        processes, too much memory, or the disk of ``scratch`` filled past its floor (``disk_floor``) by what they
        wrote there or printed to their log (``filled``; ``start``: the free disk and the folder's bytes when it was
        made)."""
        rss, tasks = containment.tree_usage(pids)
        self._last_poll = time.monotonic()
        self.peak_tasks = max(self.peak_tasks, tasks)
        if tasks > self.limits.max_tasks:
            return (
                f"your code ran {tasks} threads and processes at once, more than the {self.limits.max_tasks} a "
                "grading may, and was stopped: a thread or process started in a loop?"
            )
        if rss > self.limits.memory_bytes:
            return (
                f"the grading process used more than {self.limits.memory_bytes / 1024**3:.1f} GiB "
                "of memory and was stopped: a huge allocation, or tensors kept alive in a list?"
            )
        floor = disk_floor(start[0], self.limits.min_free_disk)
        if scratch is not None and (free := shutil.disk_usage(scratch).free) < floor:
            now, hidden = scratch_bytes(scratch), containment.unlinked_bytes(pids, os.stat(scratch).st_dev)
            printed = log_bytes(self.workdir)
            if filled(None if now is None or hidden is None else now + hidden + printed - start[1], start[0] - free):
                return "your code filled the disk and was stopped: it may write only small files"
        return None

    def _check_limits(self) -> None:
        """Called while waiting on the worker: stop it if it is over a limit (``_over_limits``), or if the watch
        stopped it between requests."""
        worker = self._worker
        stopped = worker.stopped_because if worker is not None else None
        if worker is not None and not stopped and containment.gone(worker.proc.pid):
            _end(worker)  # a process it left holds the channel open: ended, the channel closes and says how it died
            return
        why = stopped or self._over_limits(self.pids(), self._scratch, self._disk_start)
        if why:
            raise self._lost(why)

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """No poll of the watch's inside the block: wrap every timed region in it, clock start to clock stop. A poll
        the watch skipped meanwhile runs when the outermost block ends (``_overdue``)."""
        with self._quiet:
            self._quiet_depth += 1
            try:
                yield
            finally:
                self._quiet_depth -= 1
        self._overdue()

    def stop_reason(self) -> str | None:
        """Why the watch ended the last worker between checks (it had gone over a limit), or None. The runner fails
        the next check with it: that is the check a worker's restart would otherwise hide it from."""
        worker = self._worker
        return worker.stopped_because if worker is not None else None

    def _overdue(self) -> None:
        """The poll the watch could not run while a request or a timed region held ``quiet()`` (back-to-back timed
        samples can hold it across every tick), run now that nothing is timed."""
        if self._quiet_depth == 0 and self._worker is not None:
            if time.monotonic() - self._last_poll > WATCH_INTERVAL_S:
                self._check_limits()

    def _watch(self, worker: _Worker) -> None:
        """Between requests, while the judge computes rather than waits, what ``_check_limits`` does while it waits:
        a thread learner code left running could otherwise fork, spawn threads or allocate unwatched until the next
        request. Over a limit, it ends the worker's tree and keeps the reason for the next request; a worker that
        died leaving processes behind has them ended at once. It never polls inside ``quiet()`` (a request on its
        way, where ``_check_limits`` polls, or anything timed), nor while another judge on the machine runs a
        speed check (it asks the machine lock, not the worker's state: learner code can stop its own worker to
        look frozen)."""
        while not worker.watch_done.wait(WATCH_INTERVAL_S):
            if not self._quiet.acquire(blocking=False):
                continue
            try:
                with self._lifecycle:
                    if worker.watch_done.is_set():
                        return
                    if containment.gone(worker.proc.pid):  # its orphans: adopted by this judge, frozen by no other
                        _end(worker)
                        return
                    with machine_lock.unless_timing() as free:  # the kill too: no judge times while it runs
                        why = self._over_limits({worker.proc.pid}, worker.scratch, worker.disk_start) if free else None
                        if why:
                            worker.stopped_because = why
                            _end(worker)
                            return
            except Exception as exc:  # a poll that failed (a process gone mid-read, a folder removed): try again
                if not self._watch_failed:
                    self._watch_failed = True
                    print(f"grader: the worker watch's poll failed ({exc!r}); it keeps trying", file=sys.stderr)
                continue
            finally:
                self._quiet.release()

    @staticmethod
    def _unsolicited(fd: int) -> bool:
        """True if a message is waiting that nobody asked for (a closed channel is not one: a death shows later)."""
        if not readable(fd):
            return False
        try:
            recv_frame(fd, time.monotonic() + 1.0)
        except (EOFError, OSError):
            return False
        except (Deadline, ProtocolError):
            return True
        return True

    def _watch_request(self, worker: _Worker, started: float):
        """What the judge does while it waits for an answer: check the limits and, where an earlier request ran out
        of time at a line of the notebook, look whether this one is stuck at that line too (``SAME_PLACE_*``)."""
        if not self._hung_at:
            return self._check_limits
        next_sample, seen = started + SAME_PLACE_AFTER_S, []

        def idle() -> None:
            nonlocal next_sample
            self._check_limits()
            if time.monotonic() < next_sample:
                return
            where = stuck.parse(stuck.stack_of(worker.proc.pid, worker.log))
            next_sample = time.monotonic() + SAME_PLACE_EVERY_S
            seen.append(stuck.place(where, self.cells))
            last = seen[-SAME_PLACE_SAMPLES:]
            if len(last) == SAME_PLACE_SAMPLES and last[-1] in self._hung_at and len(set(last)) == 1:
                raise self._lost(
                    f"stopped after {time.monotonic() - started:.0f} s, not at the check's limit: your code was still "
                    f"where {self._hung_at[seen[-1]]} ran out of time, at every look since "
                    f"{SAME_PLACE_AFTER_S:.0f} s.{stuck.describe(where, self.cells)} An endless loop?"
                )

        return idle

    def _request(self, header: dict, tensors: dict | None = None, what: str = "this check") -> Answer:
        if self._worker is None:
            self.start()
        worker = self._worker
        fd = worker.conn.fileno()
        if self._unsolicited(fd):
            raise ProtocolError("the worker sent a message nobody asked for")
        rid = self._next_id = self._next_id + 1
        started = time.monotonic()
        idle = self._watch_request(worker, started)
        self._quiet.acquire()
        self._quiet_depth += 1
        try:
            if worker.stopped_because:  # the watch stopped the worker since the last answer (no poll here: this
                raise self._lost(worker.stopped_because)  # may be inside a timed sample)
            send_frame(fd, pack({**header, "id": rid}, tensors), self.deadline, idle)
            data = recv_frame(fd, self.deadline, idle)
        except Deadline:
            elapsed, limit = time.monotonic() - started, self.limits.check_timeout_s
            took = (
                f"no answer from {what} after {elapsed:.0f} s"
                if elapsed >= limit - 1
                else f"the check's {limit:.0f} s ran out during {what} (its earlier steps took the rest)"
            )
            where = stuck.parse(stuck.stack_of(worker.proc.pid, worker.log))  # before the worker is ended
            if (place := stuck.place(where, self.cells)) is not None:
                self._hung_at.setdefault(place, self.check_id or what)
            raise self._lost(
                f"{took}. An endless loop, a blocking call, or far too slow a solution?"
                + stuck.describe(where, self.cells)
            ) from None
        except (EOFError, BrokenPipeError, ConnectionResetError):
            if worker.stopped_because:
                raise self._lost(worker.stopped_because) from None
            worker.proc.join(5)
            tail = self._tail()
            raise self._lost(
                f"the grading process {_death(worker.proc.exitcode)} while running {what}"
                + (f"; its last output:\n{tail}" if tail else "")
            ) from None
        finally:
            self._quiet_depth -= 1
            self._quiet.release()
        header_in, tensors_in = unpack(data)
        if header_in.get("id") != rid or not isinstance(header_in.get("ok"), bool):
            raise ProtocolError("the worker answered out of turn")
        if self._unsolicited(fd):
            raise ProtocolError("the worker sent more than one answer")
        if header_in["ok"]:
            values = header_in.get("values")
            if not isinstance(values, dict):
                raise ProtocolError("the worker's answer has no values")
            self._overdue()  # no timed region holds quiet() here: a poll the watch skipped runs now
            return Answer(header.get("probe", header.get("op", "")), values, tensors_in)
        error = header_in.get("error")
        if not isinstance(error, dict):
            raise ProtocolError("the worker's failure report is malformed")
        self._check_limits()  # a bomb the kernel refused (a task cap in its cgroup) fails as the bomb, not its error
        from grader.interface import contract

        raise explain(error, contract(self.exercise, error.get("name")), self.problems, header.get("probe", ""))

    def ask(
        self,
        probe: str,
        args: dict | None = None,
        tensors: dict[str, torch.Tensor] | None = None,
        what: str = "this check",
    ) -> Answer:
        """Run ``probe`` in the worker on ``args`` and ``tensors``; what it observed, or ``LearnerFailure``."""
        needs = None if self.needs is None else list(self.needs)
        return self._request({"probe": probe, "args": args or {}, "needs": needs}, tensors, what)

    @contextlib.contextmanager
    def frozen(self) -> Iterator[int]:
        """Every learner process stopped (SIGSTOP) inside the block; yields how many. The watch pauses with them.
        Learner code that ran anyway (``containment.FreezeBroken``) ends the worker, and the check fails."""
        try:
            with self.quiet(), containment.stopped(self.pids()) as count:
                yield count
        except containment.FreezeBroken as exc:
            raise self._lost(str(exc)) from None

    @contextlib.contextmanager
    def same_cores(self, cpus: set[int]) -> Iterator[None]:
        """The judge and every learner process on ``cpus`` inside the block (``containment.same_cores``), pinned
        while they are stopped."""
        with containment.same_cores(self.pids(), cpus, hold=self.frozen):
            yield


def _serve(conn, config) -> None:
    from grader.worker import serve

    serve(conn, config)
