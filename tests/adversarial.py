"""Hostile submissions to exercise 1, and what the grader must do with each: gain them nothing.

Each attack starts from the unmodified exercise (nothing solved), the reference solution, or the solution with
SmoothedCE replaced by the grader's own naive loss (correct, and about 15x too slow), then adds code: cells run
when the notebook loads (an UPPER_CASE constant calls the attack), or edits that run inside a check. For each
check it names, the expected outcome is ``"pass"`` (the attack may not break an honest result either),
``"fail"``, or a substring the failure message must contain. ``forbidden`` strings must appear in no message
of the report (secrets an attack tries to leak through its error messages); ``flagged`` attacks must have the
submission flagged for review (``protocol``) and, unless ``zeroes_all`` is false, zeroed; ``untouched`` paths
(relative to the repository) must be byte-for-byte the same after grading, and ``absent`` ones must not exist.
``tests/test_integrity.py`` runs them all.

New tricks belong here: every cheat ever found becomes a case. Attacks that act outside any check (a bomb that
starts between requests, one that first stops its own worker, a worker that dies leaving processes behind, one that
ends while a process it left holds the judge's channel open, a dead worker's pid taken by another process) need a
worker driven step by step, and are in ``tests/test_task_limit.py``; a freeze undone from outside is in
``tests/test_freeze.py`` and ``tests/test_cgroups.py``; what is handed in instead of a notebook (a link to a
solution, a pipe, a folder, a notebook that takes gigabytes to parse) is in ``tests/test_submitted_files.py`` and
``tests/test_loader.py``, with the cells IPython cannot rewrite in time; locked cells copied or notes forged are in
``tests/test_restore.py``; a socket that reaches another process is in ``tests/test_sandbox.py``; a submission
whose grading process dies (it must cost only itself in a batch) is in ``tests/test_batch_slots.py``; a notebook
nbgrader must not open, or one handed in again to keep or replace a grade, is in ``tests/test_autograde_shares.py``;
a model that is right only with the grader's own copy of a learner's op (exercise 2's second ask) still fails, in
``tests/test_judging.py``; a learner id nbgrader reads as a pattern, a half-graded classmate, and a notebook that
takes nbconvert an hour to render are in ``tests/test_autograde_shares.py``; a format-3 notebook that shows
Jupyter one set of cells and the grader another is in ``tests/test_loader.py`` and, graded, in
``tests/test_integrity.py``; a note forged through an exception's text is in ``tests/test_restore.py``; a disk
filled through files deleted while open, hidden in a folder the judge cannot read, or printed to the worker's log,
is in ``tests/test_disk_floor.py``; memory held in System V or POSIX IPC objects, which outlive the worker, is in
``tests/test_sandbox.py``; a learner's number too large to print, or a bucket the judge would build millions of
tokens long, is in ``tests/test_learner_numbers.py``; nan weights passing as trained are a wrong submission of
exercise 3 (``grader/exercises/ex03/submissions.py``); a table of fingerprints over one secret factor is in
``tests/test_fingerprints.py`` and below, with a chain split by one forged fingerprint and a nan fingerprint before
the last call; a batch run eagerly beside a compiled call on a dummy input, culprits named from the failing rung
without the bisector, and blocks compiled for inference with their backward left eager are wrong submissions of
exercises 4, 5 and 6 (``grader/exercises/exNN/submissions.py``); a stack forged into the worker's log, which the
judge reads when a check runs out of time, is below, and how that text is read in ``tests/test_stuck.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

VALUES, GRADS, TRAFFIC, SPEED = (
    "ex01.smoothed_ce.values",
    "ex01.smoothed_ce.gradients",
    "ex01.smoothed_ce.no_host_traffic",
    "ex01.smoothed_ce.speed",
)
BUILTIN, COMPILED_SPEED, UPDATE, NO_SYNC = (
    "ex01.builtin.values",
    "ex01.compiled.speed",
    "ex01.train_step.update",
    "ex01.train_step.no_sync",
)
RETURN = "        return ((1 - eps) * nll + eps / num_classes * smooth) / target_weight.sum()"
INIT = '        self.register_buffer("weight", torch.tensor(class_weights, dtype=torch.float32))'
STEP = "    optimizer.zero_grad(set_to_none=True)\n    total = torch.zeros((), device=images.device)"
BUILTIN_RETURN = "    return nn.CrossEntropyLoss(\n"
# the grader's naive loss in place of the learner's: right values, no speed
NAIVE = {"class SmoothedCE(nn.Module):": "class _Unused(nn.Module):"}
NAIVE_CELL = "class SmoothedCE(NaiveSmoothedCE):\n    pass\n"


def replacing_run_schedule(definition: str, name: str) -> str:
    """A notebook cell that defines ``name`` (``definition``, which may call ``REAL``, the grader's own
    ``run_schedule``) and puts it in place of ``grader.probing.run_schedule`` when the notebook loads."""
    return (
        "import torch\nimport grader.probing as _probing\n\nREAL = _probing.run_schedule\n\n\n"
        f"{definition}\n\ndef _install():\n    _probing.run_schedule = {name}\n    return 1\n\n\n"
        "INSTALLED = _install()\n"
    )


@dataclass(frozen=True)
class Attack:
    base: str  # "exercise", "solution" or "naive"
    expect: dict[str, str]  # check id: "pass", "fail", or what its message must mention ("a | b": either)
    cells: tuple[str, ...] = ()
    edits: dict[str, str] = field(default_factory=dict)
    flagged: bool = False
    zeroes_all: bool = True  # a flagged attack zeroes every check; false: only the checks it breaks (answers disagree)
    forbidden: tuple[str, ...] = ()
    untouched: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    problem: str = ""  # a substring one of the notebook's load problems must contain


SKIP_TIMED_CALLS = """
import grader.probing as _probing

RUN_ALL = _probing.run_schedule


def _run_the_tail(fn, staged, schedule, grads, params=(), seed=None, chain=False):
    # run only the last call of a timed sample (whose output the judge checks), with the factors the judge drew for
    # it, and copy its fingerprint for the rest
    calls = _probing.seeded(schedule, seed, staged)
    out, prints = RUN_ALL(fn, staged, calls[-1:], grads, params)
    return out, prints.expand(len(schedule), 2).clone()


def _install():
    _probing.run_schedule = _run_the_tail
    return 1


TAIL_ONLY = _install()
"""


# red team, session 33 (exercise 2, here on exercise 1): tabulate every set's fingerprints over the secret factor's
# range in the untimed first call, then run one timed call in eight (and the last, whose output the judge checks)
# and interpolate the rest; one call in four took exercise 2's naive scorer to 1.93x against 1.25x while each call
# had one factor
TABULATE_THE_FACTOR = """
import bisect
import torch
import grader.probing as _probing

REAL = _probing.run_schedule
GRID = [0.799 + 0.452 * k / 59 for k in range(60)]  # linear interpolation: within 1e-5 of the loss on one factor
TABLES = {}


def _table(fn, staged, grads, params):
    key = (id(fn), id(staged))
    if key not in TABLES:
        TABLES[key] = [REAL(fn, staged, [(i, s) for s in GRID], grads, params)[1] for i in range(len(staged))]
    return TABLES[key]


def _lookup(rows, factor):
    k = min(max(bisect.bisect_left(GRID, factor), 1), len(GRID) - 1)
    t = (factor - GRID[k - 1]) / (GRID[k] - GRID[k - 1])
    return rows[k - 1] + t * (rows[k] - rows[k - 1])


def _tabulated(fn, staged, schedule, grads, params=(), seed=None, chain=False):
    table = _table(fn, staged, grads, params)
    calls = getattr(_probing, "seeded", lambda s, *_: s)(schedule, seed, staged)  # before session 33: no seed
    out, prints = None, []
    for j, (i, factor) in enumerate(calls):
        if j == len(calls) - 1 or j % 8 == 0:
            out, p = REAL(fn, staged, [(i, factor)], grads, params)
            prints.append(p[0])
        else:  # the factors' mean: the best one number a table over one factor can be read at
            if isinstance(factor, dict):
                factor = float(torch.cat([f.flatten() for f in factor.values()]).mean())
            prints.append(_lookup(table[i], factor))
    return out, torch.stack(prints)


def _install():
    _probing.run_schedule = _tabulated
    return 1


TABULATED = _install()
"""


# red team 2, session 33 (exercise 2, here on exercise 1): once a sample's seed arrived, every call's factors were
# known, and learner code computed the calls together, batched, with its own forward and backward (the slow scorer
# passed at 1.37x to 1.86x against 1.25x). Since session 34 each call's factors hang on the fingerprint of the call
# before it; here every call runs on the factors its seed alone gives, as a batch computed up front would need
FROM_THE_SEED_ALONE = replacing_run_schedule(
    """
def _unchained(fn, staged, schedule, grads, params=(), seed=None, chain=False):
    return REAL(fn, staged, schedule, grads, params, seed)
""",
    "_unchained",
)


# session 34: the judge computes the chain from the fingerprints the worker reports; nan ones make its recomputed
# inputs, and so its reference, nan too, and the last-output check takes nan for nan (grader.judging, equal_nan)
NAN_FINGERPRINTS = replacing_run_schedule(
    """
def _nan_everywhere(fn, staged, schedule, grads, params=(), seed=None, chain=False):
    if len(schedule) == 1 or not chain:  # no chain (one call, or the untimed first sample): run it honestly
        return REAL(fn, staged, schedule, grads, params, seed, chain)
    out, _ = REAL(fn, staged, schedule[-1:], grads, params, seed)  # one call's work for the whole sample
    return out.detach() * float("nan"), torch.full((len(schedule), 2), float("nan"))
""",
    "_nan_everywhere",
)


# a review, session 35: the judge chains each call from the row reported before it, so one made-up row splits a
# sample's chain in two, and the calls after it could start at once, beside the calls before it (here they run
# after, from the made-up row: the split, without the speed). A spot check finds it only where it picks that row;
# every call of some samples, picked in secret, is now recomputed
SPLIT_CHAIN = replacing_run_schedule(
    """
def _split(fn, staged, schedule, grads, params=(), seed=None, chain=False):
    if not chain or len(schedule) < 4:
        return REAL(fn, staged, schedule, grads, params, seed, chain)
    params = tuple(p for p in params if isinstance(p, torch.Tensor))
    k, out, prints, previous = len(schedule) // 2, None, [], None
    for c, (index, scale) in enumerate(_probing.seeded(schedule, seed, staged)):
        if c == k:  # a made-up fingerprint: the second half hangs on it, not on the first half's last call
            previous = [t * 1.5 for t in previous]
            prints += previous
            continue
        args = _probing.transform(staged[index], _probing.chained(scale, previous), grads)
        for p in params:
            p.grad = None
        out = fn(*args)
        previous = _probing.fingerprint(out, args, params)
        prints += previous
    return out, torch.stack(prints).view(-1, 2)
""",
    "_split",
)


# red team 2, session 33: a process of the learner's own widened its CPU mask and worked on the other core beside
# the timed calls (the red team's ran half of exercise 2's calls there, and passed at 1.46x). The judge's CPU-time
# bound (grader.speed.check_cores) caught it on an idle machine, but not in CI, where the other core was busy and
# the helper got under a quarter of one; the sandbox now refuses sched_setaffinity, so the helper, which works
# only on a core of its own, gives up, and the reference's checks pass as they would without it
HELPER_ON_ANOTHER_CORE = """
import subprocess, sys

BURN = (
    "import os\\n"
    "try:\\n"
    "    while True:\\n"
    "        os.sched_setaffinity(0, range(os.cpu_count()))\\n"
    "        sum(range(10**5))\\n"
    "except PermissionError:\\n"
    "    pass\\n"
)
HELPER = subprocess.Popen([sys.executable, "-c", BURN])
"""


# exercise 2 (tests/test_integrity.py): the timed forward runs, its backward is skipped (red team, session 16)
SKIP_BACKWARD = """import grader.exercises.ex02.probes as _probes

_ORIGINAL_STAGE = _probes.stage_timed


def _skip_backward_while_timed(call, handle, fn, *args, **kwargs):
    def forward_only(x):
        saved = torch.Tensor.backward
        torch.Tensor.backward = lambda *a, **k: None
        try:
            return fn(x)
        finally:
            torch.Tensor.backward = saved

    return _ORIGINAL_STAGE(call, handle, forward_only, *args, **kwargs)


PATCHED = setattr(_probes, "stage_timed", _skip_backward_while_timed)
"""


# exercise 3 (tests/test_integrity.py): the timed training step runs on every other call only; the calls between
# return the last loss again (finite, and a loss of this very model: the check before session 18 accepted it)
SKIP_TRAINING_STEPS = """import grader.exercises.ex03.probes as _probes

_ORIGINAL_STAGE = _probes.stage_timed


def _every_other_step(call, handle, step, *args, **kwargs):
    calls, last = [0], [None]

    def half_the_work(images, labels):
        calls[0] += 1
        if last[0] is None or calls[0] % 2:
            last[0] = step(images, labels)
        return last[0]

    return _ORIGINAL_STAGE(call, handle, half_the_work, *args, **kwargs)


PATCHED = setattr(_probes, "stage_timed", _every_other_step)
"""


# exercise 4 (tests/test_integrity.py): the timed cold stream runs only some of its batches (the three the judge
# named in its request until session 18, else every fifth) and answers the others with a copied output
SKIP_STREAM_BATCHES = """import grader.exercises.ex04.probes as _probes

_RUN_BATCHES = _probes.run_batches


def _some_batches(call, fn, names, counter=None, model=None):
    if counter is None or call.arg("backend") is None:  # not the timed stream: run everything
        return _RUN_BATCHES(call, fn, names, counter, model)
    outs, _ = _RUN_BATCHES(call, fn, names[::5], counter, model)
    first = next(iter(outs.values()))
    return {f"{n}.out": outs.get(f"{n}.out", first) for n in names}, []


PATCHED = setattr(_probes, "run_batches", _some_batches)
"""


# exercise 4 (tests/test_integrity.py): plain learner code: compile_tagger hands back the model uncompiled, whose
# eager stream pays no compile at all
EAGER_STREAM = {"    return torch.compile(model, backend=backend, dynamic=False)\n": "    return model\n"}

# exercise 6 (tests/test_integrity.py): plain learner code, no probe rewritten: compile_blocks hands the counting
# backend a token function, so a frame is counted, and leaves every block eager (a capture in no time)
TOKEN_COMPILE = {
    "    for module in model.modules():\n": (
        "    torch.compile(lambda x: x + 1, backend=backend)(torch.ones(1))  # a frame for the counter\n"
        "    return model\n"
        "    for module in model.modules():\n"
    )
}


FRAME_WALK = '''
import sys


def _forge():
    """Walk up the frames to the grading worker's channel and report every check passed (the old protocol)."""
    frame, sent = sys._getframe(), 0
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if hasattr(value, "send_bytes"):
                for cid in ("ex01.smoothed_ce.values", "ex01.smoothed_ce.speed"):
                    value.send_bytes(b'{"id": 1, "ok": true, "values": {"passed": true, "check": "' + cid.encode()
                                     + b'"}}')
                    sent += 1
        frame = frame.f_back
    return sent


FORGED = _forge()
'''

GC_WALK = '''
import gc
import os
import struct


def _forge_everywhere():
    """Find every pipe and socket the process holds (gc and /proc/self/fd) and write a well-formed frame claiming
    success into each, at load time and again inside a check."""
    payload = b'{"id": 2, "ok": true, "values": {"passed": true}}'
    frame = struct.pack("<Q", 12 + len(payload)) + struct.pack("<IQ", len(payload), 0) + payload
    for obj in gc.get_objects():
        if type(obj).__name__ == "Connection":
            try:
                obj.send_bytes(frame)
            except Exception:
                pass
    for fd in os.listdir("/proc/self/fd"):
        try:
            os.write(int(fd), frame)
        except Exception:
            pass
    return 1


FORGED_EVERYWHERE = _forge_everywhere()
'''

FORGED_PROBES = '''
import torch
import grader.probing as _probing


def _lie(call):
    """Answer every loss probe with a plausible loss and no traffic, computing nothing."""
    return _probing.Reply({"syncs": {}, "host_tensors": {}, "summary": "none"},
                          {"loss": torch.tensor(4.6, dtype=torch.float64), "grad": torch.zeros(7, 3)})


for _name in list(_probing.PROBES):
    if _name.startswith("ex01."):
        _probing.PROBES[_name] = _lie
FORGED_PROBES = 1
'''

BURN_THREAD = """
import threading


def _burn():
    x = 0
    while True:
        x += 1


def _start():
    for _ in range(2):
        threading.Thread(target=_burn, daemon=True).start()
    return 2


BURNERS = _start()
"""

BURN_DAEMON = '''
import os


def _escape_and_burn():
    """Double fork and setsid: a daemon that is nobody's child, burning the CPU while the grader times."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            x = 0
            while True:
                x += 1
        os._exit(0)
    return 1


DAEMON = _escape_and_burn()
'''

THAW_AND_BURN = """
import ctypes
import signal
import threading


def _thaw_and_burn():
    \"\"\"A POSIX timer sends the worker SIGCONT every millisecond (a handler keeps it firing), so no SIGSTOP holds,
    and two threads burn the CPU while the grader times its baseline (red team, session 29). Whether the timer
    outlives the first SIGSTOP is a race (tests/test_freeze.py); when it does, the judge sees the CPU time.\"\"\"
    libc = ctypes.CDLL(None, use_errno=True)

    class TS(ctypes.Structure):
        _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]

    class ITS(ctypes.Structure):
        _fields_ = [("interval", TS), ("value", TS)]

    class EV(ctypes.Structure):
        _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                    ("pad", ctypes.c_byte * 48)]

    signal.signal(signal.SIGCONT, lambda *_: None)
    timer = ctypes.c_void_p()
    libc.timer_create(1, ctypes.byref(EV(None, int(signal.SIGCONT), 0)), ctypes.byref(timer))
    libc.timer_settime(timer, 0, ctypes.byref(ITS(TS(0, 1_000_000), TS(0, 1_000_000))), None)

    def _burn():
        x = 0
        while True:
            x += 1

    for _ in range(2):
        threading.Thread(target=_burn, daemon=True).start()
    return timer.value


THAWED = _thaw_and_burn()
"""

HOOKS = """
import sys
import threading
import time


def _slow(frame, event, arg):
    if event == "call":
        time.sleep(0)


def _hook():
    sys.setprofile(_slow)
    threading.setprofile(_slow)
    sys.settrace(None)
    return 1


HOOKED = _hook()
"""

THRESHOLDS = '''
from pathlib import Path


def _lower_the_bar():
    """Write permissive thresholds wherever the grader might read them, and a calibration file for this machine."""
    import coursekit
    root = Path(coursekit.__file__).resolve().parents[1]
    written = []
    for target in (root / "grader" / "thresholds.toml", root / "grader" / "exercises" / "ex01" / "thresholds.toml",
                   root / "grader" / "calibration" / "pwned.toml",
                   root / "grader" / "exercises" / "ex01" / "hidden.py", root / "pwned.txt"):
        try:
            target.write_text("required = 0.5")
            written.append(str(target))
        except OSError:
            pass
    if written:
        raise RuntimeError("WROTE " + ", ".join(written))
    return 0


LOWERED = _lower_the_bar()
'''

READ_SECRETS = '''
from pathlib import Path


class SmoothedCE:
    """Inside a check: read the hidden checks, the reference, thresholds and the solution, and leak them."""

    def __init__(self, *args, **kwargs):
        import coursekit
        root = Path(coursekit.__file__).resolve().parents[1]
        found = []
        for rel in ("grader/exercises/ex01/hidden.py", "grader/exercises/ex01/reference.py",
                    "grader/thresholds.toml", "solutions/01_cross_entropy_ladder.ipynb"):
            try:
                found.append((root / rel).read_text()[:3000])
            except OSError as exc:
                found.append(f"{rel}: {exc.strerror}")
        raise RuntimeError(" || ".join(found))
'''

SIGNALS = '''
import os
import signal


class SmoothedCE:
    """Inside a check: send SIGCONT (harmless) to every ancestor, and to every process it can see."""

    def __init__(self, *args, **kwargs):
        results = []
        pid = os.getppid()
        while pid > 1:
            try:
                os.kill(pid, signal.SIGCONT)
                results.append(f"{pid}: SIGNAL-SENT")
            except OSError as exc:
                results.append(f"{pid}: {exc.strerror}")
            try:
                pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
            except OSError:
                break
        raise RuntimeError("; ".join(results))
'''

PRIORITY = '''
import os


class SmoothedCE:
    """Inside a check: renice the grader, pin it to one CPU, lower its file limit."""

    def __init__(self, *args, **kwargs):
        import resource
        judge, results = os.getppid(), []
        for what, act in (("nice", lambda: os.setpriority(os.PRIO_PROCESS, judge, 19)),
                          ("affinity", lambda: os.sched_setaffinity(judge, {0})),
                          ("rlimit", lambda: resource.prlimit(judge, resource.RLIMIT_NOFILE, (16, 16))),
                          ("own-priority", lambda: os.setpriority(os.PRIO_PROCESS, 0, -10))):
            try:
                act()
                results.append(f"{what}: CHANGED")
            except OSError as exc:
                results.append(f"{what}: {exc.strerror}")
        raise RuntimeError("; ".join(results))
'''

SOCKETS = '''
import os
import socket


class SmoothedCE:
    """Inside a check: reach the network and local daemons."""

    def __init__(self, *args, **kwargs):
        results = []
        for family, address in ((socket.AF_INET, ("127.0.0.1", 22)), (socket.AF_UNIX, "/run/dbus/system_bus_socket")):
            try:
                s = socket.socket(family, socket.SOCK_STREAM)
                s.settimeout(1)
                s.connect(address)
                results.append("CONNECTED")
            except OSError as exc:
                results.append(exc.strerror or str(exc))
        # UNIX sockets may be made (the CUDA driver needs one): try every socket this machine lists, the grader's
        # fork server among them, by stream and by datagram, named and abstract
        try:
            lines = open("/proc/net/unix").read().splitlines()[1:]
        except OSError:
            lines = []
        names = [line.split()[-1] for line in lines if len(line.split()) > 7][:50]
        for name in names:
            address = "\\0" + name[1:] if name.startswith("@") else name
            for kind, verb in ((socket.SOCK_STREAM, "CONNECTED"), (socket.SOCK_DGRAM, "SENT")):
                try:
                    s = socket.socket(socket.AF_UNIX, kind)
                    s.settimeout(1)
                    s.connect(address) if kind == socket.SOCK_STREAM else s.sendto(b"x", address)
                    results.append(verb)
                except OSError:
                    pass
        # the worker may write its own /proc entries (the CUDA driver names threads there), not its parent's
        try:
            open(f"/proc/{os.getppid()}/oom_score_adj", "w").write("1000")
            results.append("WROTE")
        except OSError as exc:
            results.append(exc.strerror or str(exc))
        raise RuntimeError("; ".join(results))
'''

FILL_DISK = """
import os


def _fill():
    with open("big.bin", "wb") as fh:
        for _ in range(1024):
            fh.write(os.urandom(1024 * 1024))
    return 1


FILLED = _fill()
"""

CHEATS: dict[str, Attack] = {
    # not a cheat: honest code whose answer changes from call to call reads as a forged one, and its message says so;
    # it costs the check whose answers disagreed, and the checks after it still grade, each on its own merits
    "a loss that counts its calls into its answer, so its answers differ from call to call": Attack(
        "solution",
        {TRAFFIC: "keeps state that changes its output", GRADS: ", expected ", BUILTIN: "pass"},
        edits={RETURN: "        self.calls = getattr(self, 'calls', 0) + 1\n" + RETURN + " + 1e-3 * self.calls"},
        flagged=True,
        zeroes_all=False,
    ),
    "walks the frames to the result channel and reports every check passed": Attack(
        "exercise", {VALUES: "fail", SPEED: "fail", BUILTIN: "fail"}, cells=(FRAME_WALK,), flagged=True
    ),
    "finds every channel with gc and /proc/self/fd and forges well-framed answers": Attack(
        "exercise", {VALUES: "fail", SPEED: "fail"}, cells=(GC_WALK,), flagged=True
    ),
    "rewrites the grader's probes to report a plausible loss and no traffic": Attack(
        "exercise", {VALUES: "fail", GRADS: "fail", TRAFFIC: "fail", SPEED: "fail"}, cells=(FORGED_PROBES,)
    ),
    "burns the CPU in threads while the grader times its baseline": Attack(
        "naive", {VALUES: "pass", SPEED: "too slow"}, edits=NAIVE, cells=(NAIVE_CELL, BURN_THREAD)
    ),
    "escapes as a daemon (double fork, setsid) that burns the CPU": Attack(
        "naive", {VALUES: "pass", SPEED: "too slow"}, edits=NAIVE, cells=(NAIVE_CELL, BURN_DAEMON)
    ),
    "resumes itself with a SIGCONT timer and burns the CPU while the grader times its baseline": Attack(
        "naive",
        {VALUES: "pass", SPEED: "fail"},  # "ran while the grader had stopped it" if the timer wins its race
        edits=NAIVE,
        cells=(NAIVE_CELL, THAW_AND_BURN),
    ),
    "installs profile hooks in every thread": Attack(
        "naive", {VALUES: "pass", SPEED: "too slow"}, edits=NAIVE, cells=(NAIVE_CELL, HOOKS)
    ),
    "writes lower thresholds into the grader's files": Attack(
        "naive",
        {VALUES: "pass", SPEED: "too slow"},
        edits=NAIVE,
        cells=(NAIVE_CELL, THRESHOLDS),
        untouched=(
            "grader/thresholds.toml",
            "grader/exercises/ex01/thresholds.toml",
            "grader/exercises/ex01/hidden.py",
        ),
        absent=("grader/calibration/pwned.toml", "pwned.txt"),
    ),
    "reads the hidden checks, the reference and the solution, and leaks them in its error": Attack(
        "exercise",
        {VALUES: "Permission denied", GRADS: "Permission denied"},
        cells=(READ_SECRETS,),
        forbidden=("smoothed_ce_gradients", "label_smoothing=smoothing", "required = ", "BEGIN SOLUTION"),
    ),
    "signals the grader and its ancestors": Attack(
        "exercise", {VALUES: "Operation not permitted"}, cells=(SIGNALS,), forbidden=("SIGNAL-SENT",)
    ),
    "renices the grader, pins its CPU and lowers its limits": Attack(
        "exercise", {VALUES: "Operation not permitted"}, cells=(PRIORITY,), forbidden=("CHANGED",)
    ),
    "opens sockets to the network, local daemons and the fork server; writes its parent's /proc": Attack(
        "exercise", {VALUES: "Operation not permitted"}, cells=(SOCKETS,), forbidden=("CONNECTED", "SENT", "WROTE")
    ),
    "writes a file past the size limit": Attack(  # the write fails (EFBIG): only the attack's own definition is lost
        "solution", {VALUES: "pass", BUILTIN: "pass"}, cells=(FILL_DISK,), problem="File too large"
    ),
    "replays a cached output": Attack(
        "solution",
        {VALUES: "pass", SPEED: "during timing"},
        edits={
            RETURN: "        if getattr(self, '_replay', None) is not None:\n"
            "            return self._replay.detach().requires_grad_()\n"
            "        self._replay = ((1 - eps) * nll + eps / num_classes * smooth) / target_weight.sum()\n"
            "        return self._replay"
        },
    ),
    "returns a constant": Attack(
        "solution",
        {VALUES: "expected", SPEED: "during timing"},
        edits={RETURN: "        return torch.tensor(4.6, requires_grad=True)"},
    ),
    "returns a lazy tensor subclass": Attack(
        "solution",
        {VALUES: "tensor subclass", SPEED: "tensor subclass"},
        edits={
            RETURN: "        class Lazy(torch.Tensor):\n            pass\n"
            "        return (((1 - eps) * nll + eps / num_classes * smooth) / target_weight.sum()).as_subclass(Lazy)"
        },
    ),
    "runs only the last call of every timed sample and copies its fingerprint (red team, session 15)": Attack(
        "naive",
        {VALUES: "pass", SPEED: "did not compute what it should"},
        edits=NAIVE,
        cells=(NAIVE_CELL, SKIP_TIMED_CALLS),
    ),
    "tabulates fingerprints over the secret factor, runs one timed call in eight (red team, session 33)": Attack(
        "naive",
        {VALUES: "pass", SPEED: "during timing"},  # the last output or a spot check: the chain reaches both
        edits=NAIVE,
        cells=(NAIVE_CELL, TABULATE_THE_FACTOR),
    ),
    "computes every call of a sample from its seed alone, as a batch would (red team 2, session 33)": Attack(
        "solution",
        {VALUES: "pass", SPEED: "during timing", COMPILED_SPEED: "during timing"},
        cells=(FROM_THE_SEED_ALONE,),
    ),
    "reports nan fingerprints, so the judge's chain recomputes nan (session 34)": Attack(
        "solution",
        {VALUES: "pass", SPEED: "holds nan, inf", COMPILED_SPEED: "holds nan, inf"},
        cells=(NAN_FINGERPRINTS,),
    ),
    "splits each timed sample's chain with one made-up fingerprint (a review, session 35)": Attack(
        "solution",
        # the compiled loss: the skipped call shows in every sample's compiled work (session 37), and in a sample's
        # fingerprints where one is picked: whichever sample comes first
        {
            VALUES: "pass",
            SPEED: "did not compute what it should",
            COMPILED_SPEED: "did not compute what it should | part of the timed work ran eagerly",
        },
        cells=(SPLIT_CHAIN,),
    ),
    "a helper process would widen its CPU mask and work beside the timed calls (red team 2, session 33)": Attack(
        "solution",
        {VALUES: "pass", SPEED: "pass", COMPILED_SPEED: "pass"},
        cells=(HELPER_ON_ANOTHER_CORE,),
    ),
    "switches float32 matmuls to TF32 / bfloat16 inside the loss (session 39)": Attack(
        "solution",
        {VALUES: "float32 precision settings", SPEED: "float32 precision settings"},
        edits={RETURN: "        torch.set_float32_matmul_precision('medium')\n" + RETURN},
    ),
    "switches float32 matmuls to TF32 / bfloat16 when the notebook loads (session 39)": Attack(
        "solution",
        {VALUES: "pass"},  # set back before every check, and said so
        cells=("import torch\n\nPRECISION = torch.set_float32_matmul_precision('medium')\n",),
        problem="float32 precision settings",
    ),
    "patches the timer": Attack(
        "naive",
        {VALUES: "pass", SPEED: "too slow"},
        edits=NAIVE,
        cells=(
            NAIVE_CELL,
            "import coursekit.timing, time\ncoursekit.timing._clock = lambda: 0.0\ntime.perf_counter = lambda: 0.0\n"
            "CLOCK = time.perf_counter()\n",
        ),
    ),
    "patches torch.allclose to pass a wrong loss": Attack(
        "solution",
        {VALUES: "expected", GRADS: "expected"},
        edits={
            INIT: INIT + "\n        torch.allclose = lambda *args, **kwargs: True",
            RETURN: "        return logits.sum() * 0 + 1.0",
        },
    ),
    "imports the grader's reference": Attack(
        "solution",
        {VALUES: "fail"},
        edits={
            RETURN: "        from grader.exercises.ex01.reference import smoothed_ce as reference\n"
            "        value, _ = reference(logits, target, self.weight.tolist(), eps, self.ignore_index)\n"
            "        return value.to(logits.dtype) + 0 * logits.sum()"
        },
    ),
    "sleeps forever": Attack(
        "solution",
        {VALUES: "pass", BUILTIN: "no answer from this check"},
        edits={BUILTIN_RETURN: "    import time\n    time.sleep(3600)\n" + BUILTIN_RETURN},
    ),
    "forges the stack the judge reads when a check runs out of time": Attack(
        "solution",
        {VALUES: "pass", BUILTIN: "no answer from this check"},
        edits={
            BUILTIN_RETURN: "    import sys, threading, time\n"
            "    fake = ('Current thread 0x1 (most recent call first):\\n'\n"
            "            '  File \"<code cell 99999999999999999999>\", line 1 in f\\n'\n"
            "            '  File \"<code cell 1>\", line 1 in ' + 'FORGED' * 10000 + '\\n'\n"
            "            '  File \"/g/grader/probing.py\", line 1 in run\\n'\n"
            "            'grader-dynamo-tracing: <code cell 1>\\t' + '9' * 6000 + '\\tf\\n')\n"
            "    def forge():\n"
            "        while True:\n"
            "            sys.stderr.write(fake)\n"
            "            time.sleep(0.05)\n"
            "    threading.Thread(target=forge, daemon=True).start()\n"
            "    time.sleep(3600)\n" + BUILTIN_RETURN
        },
        forbidden=("FORGED" * 20,),
    ),
    "hogs memory": Attack(
        "solution",
        {VALUES: "pass", BUILTIN: "memory", UPDATE: "pass"},
        edits={BUILTIN_RETURN: "    hog = [torch.ones(64 * 1024**2) for _ in range(64)]\n" + BUILTIN_RETURN},
    ),
    "forks a swarm of processes, then hangs": Attack(
        "solution",
        {UPDATE: "no answer from this check", VALUES: "pass"},
        edits={
            STEP: "    import subprocess, time\n    swarm = [subprocess.Popen(['sleep', '317']) for _ in range(20)]\n"
            "    time.sleep(3600)\n" + STEP
        },
    ),
    "starts threads and processes in a loop (a bomb with small stacks, under the memory cap)": Attack(
        "solution",
        {UPDATE: "threads and processes at once", VALUES: "pass"},
        edits={
            STEP: "    import subprocess, threading\n    threading.stack_size(64 * 1024)\n"
            "    hold = threading.Event()\n    swarm = [subprocess.Popen(['sleep', '331']) for _ in range(100)]\n"
            "    for _ in range(3000):\n        threading.Thread(target=hold.wait, daemon=True).start()\n"
            "    hold.wait()\n" + STEP
        },
    ),
    "calls sys.exit inside a check": Attack(
        "solution",
        {UPDATE: "exited with code 0", NO_SYNC: "exited with code 0", VALUES: "pass"},
        edits={STEP: "    import sys\n    sys.exit(0)\n" + STEP},
    ),
}
