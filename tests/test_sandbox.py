"""The sandbox and the wire, tested on their own: quick, no notebook, no torch compile.

A forked child enters the sandbox exactly as a grading worker does and tries what hostile code would; the
judge's side of the wire is fed malformed, oversized, half-sent and unsolicited messages.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import struct
import tempfile
import time
from pathlib import Path

import pytest
import torch

from grader import sandbox
from grader.protocol import Answer, Deadline, ProtocolError, pack, recv_frame, send_frame, unpack
from grader.worker_start import ROOT, policy_for

REPORT = sandbox.probe()
needs_sandbox = pytest.mark.skipif(not REPORT.active, reason=f"no sandbox here: {REPORT.why_not}")


def in_sandbox(attempts: dict, abi: int | None = None) -> dict[str, str]:
    """Run each ``name: callable`` in a forked, sandboxed child; ``{name: "ALLOWED" | "blocked: ..."}``."""
    scratch = Path(tempfile.mkdtemp(prefix="sandbox-test-"))

    def body() -> dict[str, str]:
        report = sandbox.Report(**{**vars(REPORT), **({"landlock_abi": abi} if abi else {})})
        sandbox.enter(policy_for(scratch, "cpu"), report)
        results = {}
        for name, attempt in {"write its scratch": lambda: (scratch / "mine.txt").write_text("x"), **attempts}.items():
            try:
                attempt()
                results[name] = "ALLOWED"
            except OSError as exc:
                results[name] = f"blocked: {exc.strerror}"
        return results

    return sandbox.in_forked_child(body)


@needs_sandbox
def test_learner_code_reads_and_writes_only_what_it_may(tmp_path: Path) -> None:
    outside = tmp_path / "victim.txt"
    outside.write_text("keep me")
    results = in_sandbox(
        {
            "read hidden checks": lambda: (ROOT / "grader" / "exercises" / "ex01" / "hidden.py").read_text(),
            "read the solutions": lambda: (ROOT / "solutions" / "01_cross_entropy_ladder.ipynb").read_text(),
            "read thresholds": lambda: (ROOT / "grader" / "exercises" / "ex01" / "thresholds.toml").read_text(),
            "list the repository": lambda: os.listdir(ROOT),
            "overwrite a file outside": lambda: outside.write_text("gone"),
            "delete a file outside": lambda: outside.unlink(),
            "chmod the given code": lambda: os.chmod(ROOT / "coursekit" / "lessons" / "cross_entropy" / "givens.py", 0),
            "read the given code": lambda: (ROOT / "coursekit" / "lessons" / "cross_entropy" / "givens.py").read_text(),
            "read the probes": lambda: (ROOT / "grader" / "exercises" / "ex01" / "probes.py").read_text(),
        }
    )
    for name in (
        "read hidden checks",
        "read the solutions",
        "read thresholds",
        "list the repository",
        "overwrite a file outside",
        "delete a file outside",
        "chmod the given code",
    ):
        assert results[name].startswith("blocked"), (name, results[name])
    assert results["read the given code"] == results["read the probes"] == results["write its scratch"] == "ALLOWED"
    assert outside.read_text() == "keep me"


def clone_as_sibling() -> None:
    """``clone(CLONE_PARENT | SIGCHLD)`` by raw syscall, as a red-team notebook did: the new process's parent is
    the caller's parent, outside the worker's tree. The child exits at once."""
    import ctypes
    import platform

    numbers = {"x86_64": 56, "aarch64": 220}
    if platform.machine() not in numbers:
        pytest.skip(f"no clone syscall number for {platform.machine()} here")
    libc = ctypes.CDLL(None, use_errno=True)
    pid = libc.syscall(numbers[platform.machine()], 0x00008000 | signal.SIGCHLD, 0, 0, 0, 0)  # CLONE_PARENT
    if pid == 0:
        os._exit(0)
    if pid < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _ipc(make: str, control: str, *args: int) -> None:
    """Make a System V IPC object (``IPC_PRIVATE``, ``IPC_CREAT``): OSError if refused; removed again if made, since
    it would outlive the test (red team, session 33)."""
    libc = ctypes.CDLL(None, use_errno=True)
    made = getattr(libc, make)(*args)
    if made == -1:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    getattr(libc, control)(made, *([0] if control == "semctl" else []), 0, None)  # IPC_RMID


def _posix_queue() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    name = f"/grader-test-{os.getpid()}".encode()
    if libc.mq_open(name, os.O_CREAT | os.O_RDWR, 0o600, None) == -1:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    libc.mq_unlink(name)


@needs_sandbox
def test_learner_code_reaches_no_network_and_no_other_process(tmp_path: Path) -> None:
    judge = os.getpid()
    listener, dgram = tmp_path / "judge.sock", tmp_path / "judge.dgram"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(listener))
    server.listen()
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(b"\0grader-test")
    abstract.listen()
    sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sink.bind(str(dgram))
    results = in_sandbox(
        {
            "tcp socket": lambda: socket.create_connection(("127.0.0.1", 9), timeout=1),
            "udp datagram": lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", 9)),
            "connect a unix socket": lambda: socket.socket(socket.AF_UNIX).connect(str(listener)),
            "connect an abstract socket": lambda: socket.socket(socket.AF_UNIX).connect(b"\0grader-test"),
            "datagram to a unix socket": lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(
                b"x", str(dgram)
            ),
            # red team, session 30: sendmsg's address is in memory seccomp cannot read; no datagram socket is made
            "sendmsg to a unix socket": lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendmsg(
                [b"x"], [], 0, str(dgram)
            ),
            "sendmsg from a datagram pair": lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0].sendmsg(
                [b"x"], [], 0, str(dgram)
            ),
            "write the judge's /proc": lambda: Path(f"/proc/{judge}/comm").write_text("owned"),
            "signal the judge": lambda: os.kill(judge, signal.SIGCONT),
            "read the judge's environment": lambda: Path(f"/proc/{judge}/environ").read_bytes(),
            "renice the judge": lambda: os.setpriority(os.PRIO_PROCESS, judge, 19),
            "pin the judge": lambda: os.sched_setaffinity(judge, {0}),
            # red team 2, session 33: a helper on a core of its own ran beside the timed calls
            "widen its own CPU mask": lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)),
            "raise its own priority": lambda: os.setpriority(os.PRIO_PROCESS, 0, -5),
            "fork": lambda: (lambda p: os._exit(0) if p == 0 else os.waitpid(p, 0))(os.fork()),
            "start a process outside its tree": clone_as_sibling,
            "hold memory outside its RSS (memfd)": lambda: os.memfd_create("hidden"),
            "System V shared memory": lambda: _ipc("shmget", "shmctl", 0, 4096, 0o1600),
            "a System V message queue": lambda: _ipc("msgget", "msgctl", 0, 0o1600),
            "a System V semaphore": lambda: _ipc("semget", "semctl", 0, 1, 0o1600),
            "a POSIX message queue": _posix_queue,
        }
    )
    sink.setblocking(False)
    with pytest.raises(BlockingIOError):
        sink.recv(16)  # nothing arrived, by any route
    for sock in (server, abstract, sink):
        sock.close()
    for name, outcome in results.items():
        if name not in ("fork", "write its scratch"):
            assert outcome.startswith("blocked"), (name, outcome)
    assert results["fork"] == "ALLOWED"


@needs_sandbox
def test_what_the_cuda_driver_needs_at_start_up_stays_allowed() -> None:
    """A GPU run (H100, torch 2.11) showed cuInit failing with error 304 when the worker could make no UNIX
    socket, or write nothing under its own /proc (``python -m tools.sandbox_cuda`` found both)."""
    import threading

    def name_a_thread() -> None:
        ready, done = threading.Event(), threading.Event()
        worker = threading.Thread(target=lambda: (ready.set(), done.wait()))
        worker.start()
        ready.wait()
        try:
            Path(f"/proc/self/task/{worker.native_id}/comm").write_text("cuda-EvtHandlr")
        finally:
            done.set()
            worker.join()

    results = in_sandbox(
        {
            "make a unix socket": lambda: socket.socket(socket.AF_UNIX).close(),
            "a socket pair": lambda: [s.close() for s in socket.socketpair()],
            "name a thread": name_a_thread,
        }
    )
    assert set(results.values()) == {"ALLOWED"}, results


@needs_sandbox
def test_without_landlock_signal_scoping_seccomp_allows_kill_only_to_itself() -> None:
    """On a kernel whose Landlock cannot scope signals (ABI < 6), seccomp stops a signal to another process."""
    judge = os.getpid()
    results = in_sandbox(
        {"signal the judge": lambda: os.kill(judge, signal.SIGCONT), "signal itself": lambda: os.kill(os.getpid(), 0)},
        abi=5,
    )
    assert results["signal the judge"].startswith("blocked") and results["signal itself"] == "ALLOWED"


def test_a_machine_without_a_sandbox_says_so_and_batch_grading_refuses() -> None:
    from grader.runner import SandboxRequired, sandbox_report

    off = sandbox.probe(wanted=False)
    assert not off.active and off.describe().startswith("NO SANDBOX")
    os.environ[sandbox.ENV_OFF] = "off"
    try:
        with pytest.raises(SandboxRequired, match="--unsandboxed"):
            sandbox_report("require")
        assert sandbox_report("prefer").describe().startswith("NO SANDBOX")
    finally:
        del os.environ[sandbox.ENV_OFF]


def test_messages_carry_json_and_tensors_and_nothing_else() -> None:
    tensors = {
        "x": torch.arange(6.0).reshape(2, 3),
        "mask": torch.tensor([True, False]),
        "half": torch.ones(2, dtype=torch.bfloat16),
    }
    header, back = unpack(pack({"id": 3, "values": {"a": [1, 2.5, None, "s"]}}, tensors))
    assert header == {"id": 3, "values": {"a": [1, 2.5, None, "s"]}}
    for name, t in tensors.items():
        assert back[name].dtype == t.dtype and torch.equal(back[name], t)

    class Sneaky(torch.Tensor):
        pass

    _, back = unpack(pack({}, {"s": torch.ones(2).as_subclass(Sneaky)}))
    assert type(back["s"]) is torch.Tensor


@pytest.mark.parametrize(
    "data, why",
    [
        (b"\x01", "shorter than its length prefix"),
        (struct.pack("<IQ", 5, 0) + b"[1,2]", "not a JSON object"),
        (struct.pack("<IQ", 3, 0) + b"{{{", "not JSON"),
        (struct.pack("<IQ", 2, 4) + b"{}" + b"junk", "not valid safetensors"),
        (struct.pack("<IQ", 2, 99) + b"{}", "does not match its size"),
        (b"\x80\x04\x95" + b"pickle" * 4, "does not match its size"),  # a pickle is not a message
        (struct.pack("<IQ", 200_000, 0) + b"[" * 100_000 + b"]" * 100_000, "thousands of levels deep"),  # red team 32
    ],
)
def test_malformed_messages_are_protocol_errors(data: bytes, why: str) -> None:
    with pytest.raises(ProtocolError, match=why):
        unpack(data)


def test_answers_are_checked_against_what_the_check_expects() -> None:
    answer = Answer("ex01.loss", {"n": 3, "flag": True, "xs": [1, "a"]}, {"loss": torch.zeros(())})
    assert answer.value("n", int) == 3 and answer.tensor("loss", shape=()).shape == ()
    for bad in (
        lambda: answer.value("flag", int),
        lambda: answer.tensor("loss", shape=(2,)),
        lambda: answer.tensor("missing"),
        lambda: answer.ints("xs"),
        lambda: answer.value("n", str),
    ):
        with pytest.raises(ProtocolError):
            bad()


def test_the_judges_end_never_blocks_past_its_deadline() -> None:
    """Half a frame, a huge announced length, and a peer that stops reading: each ends at the deadline (and the
    runner then ends the worker: a channel left half-read is never used again)."""

    def pair() -> tuple[socket.socket, socket.socket]:
        judge, worker = socket.socketpair()
        judge.setblocking(False)
        return judge, worker

    judge, worker = pair()
    worker.sendall(struct.pack("<Q", 100) + b"only part")
    start = time.monotonic()
    with pytest.raises(Deadline):
        recv_frame(judge.fileno(), time.monotonic() + 0.5)
    assert time.monotonic() - start < 2
    judge, worker = pair()
    worker.sendall(struct.pack("<Q", 1 << 40))  # announces a 1 TiB message
    with pytest.raises(ProtocolError, match="over the"):
        recv_frame(judge.fileno(), time.monotonic() + 1)
    judge, worker = pair()
    start = time.monotonic()
    with pytest.raises(Deadline):  # the worker never reads: the judge's write fills the buffer and gives up
        send_frame(judge.fileno(), b"y" * (64 * 1024**2), time.monotonic() + 0.5)
    assert time.monotonic() - start < 3
    judge, worker = pair()
    send_frame(worker.fileno(), b"hello")
    assert recv_frame(judge.fileno(), time.monotonic() + 1) == b"hello"


def test_a_huge_worker_log_costs_the_judge_only_its_tail(tmp_path: Path) -> None:
    """Learner code may write its log up to the file-size limit; the judge quotes its end in a message and must not
    read the whole file into memory to do it."""
    import tracemalloc
    from types import SimpleNamespace

    from grader.learner import RemoteLearner

    log = tmp_path / "worker-1.log"
    with log.open("wb") as f:
        f.write(b"x" * (32 << 20) + b"\nTraceback: the last words")
    learner = SimpleNamespace(_worker=SimpleNamespace(log=log))
    tracemalloc.start()
    try:
        tail = RemoteLearner._tail(learner)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert tail.endswith("Traceback: the last words"), tail[-80:]
    assert peak < 1 << 20, f"quoting the log's end took {peak / 2**20:.0f} MiB"
