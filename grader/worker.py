"""The grading worker: the only process that runs learner code. It decides nothing.

The judge starts it (forked from a server that imported torch once) with a private scratch folder and a
sandbox policy. Before it reads a byte of the notebook it:

* leads a process group and session of its own, and adopts orphaned descendants (a child subreaper), so
  the judge can find, freeze and end everything learner code starts;
* drops every environment variable but a short allow-list, caps file sizes (and, on CPU, its memory),
  closes every file descriptor but its channel to the judge and a log file, and points ``HOME``,
  ``TMPDIR`` and every compile cache at its scratch folder;
* answers ``STACK_SIGNAL`` by writing its threads' stacks (``faulthandler``) and the line Dynamo is tracing to its
  log, where the judge reads where a check that ran out of time was stuck (``grader.stuck``);
* enters the sandbox (``grader.sandbox``): it can write only in that scratch folder, read only the Python
  installation, the course's given code and the grader's worker-side modules, open no socket, and reach no
  process outside itself.

Then the judge sends the notebook's code cells; the worker runs their definitions (``grader.loader``) and
answers one request at a time by running a probe (``grader.probing``) and sending back what it observed,
over the channel, in the format of ``grader.protocol`` (JSON and safetensors, never pickle).
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import resource
import signal
import sys
import tempfile
from multiprocessing.connection import Connection
from pathlib import Path

MAX_FILE_BYTES = 512 * 1024**2
STACK_SIGNAL = signal.SIGUSR1  # the worker writes its threads' stacks to its log (grader.stuck reads them)
DYNAMO_MARK = "grader-dynamo-tracing: "  # then, if Dynamo is tracing, the file, line and function it is at
KEEP_ENV = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_HOME",
    "CUDA_PATH",
    "LD_LIBRARY_PATH",
    "NVIDIA_VISIBLE_DEVICES",
    "COURSEKIT_PROFILE",
    "COURSEKIT_DEVICE",
    "KINETO_LOG_LEVEL",
    "PYTHONHASHSEED",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "TORCH_LOGS",
)


def worker_environment(parent: dict[str, str], scratch: Path) -> dict[str, str]:
    """The worker's whole environment: a short allow-list from the parent, and every cache in ``scratch``."""
    env = {k: v for k, v in parent.items() if k in KEEP_ENV}
    for name, sub in (
        ("HOME", "home"),
        ("TMPDIR", "tmp"),
        ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
        ("TRITON_CACHE_DIR", "triton"),
        ("TRITON_HOME", "triton"),
        ("XDG_CACHE_HOME", "cache"),
        ("MPLCONFIGDIR", "mpl"),
        ("CUDA_CACHE_PATH", "cuda"),
        ("TORCH_HOME", "torch"),
    ):
        env[name] = str(scratch / sub)
        (scratch / sub).mkdir(parents=True, exist_ok=True)
    env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"  # compile in-process: a compile pool needs /dev/shm semaphores
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans of learner processes stay in this tree


def _harden(conn: Connection, config: dict) -> None:
    os.setsid()  # a process group and session of its own
    if sys.platform.startswith("linux"):
        _subreaper()
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if config.get("data_limit"):  # CPU only: CUDA reserves far more address space than it uses
        limit = int(config["data_limit"])
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    scratch = Path(config["scratch"])
    env = worker_environment(config["environ"], scratch)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = env["TMPDIR"]
    os.chdir(scratch)
    log = os.open(config["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)
    keep = sorted({0, 1, 2, conn.fileno()})
    for low, high in zip(keep, [*keep[1:], 1 << 20]):
        os.closerange(low + 1, high)
    sys.dont_write_bytecode = True
    signal.signal(STACK_SIGNAL, _dynamo_line)  # runs after faulthandler's dump (chain=True)
    faulthandler.register(STACK_SIGNAL, file=sys.stderr, all_threads=True, chain=True)


def _dynamo_line(signum, frame) -> None:
    """Write where Dynamo is tracing, if it is (``DYNAMO_MARK``; ``grader.stuck`` reads it): the innermost
    function it is inlining, from torch's own record of the translator at work."""
    try:
        module = sys.modules.get("torch._dynamo.symbolic_convert")
        root = getattr(getattr(module, "tls", None), "current_tx", None)
        tx = root.output.current_tx if root is not None else None
        if tx is not None:
            code = tx.f_code
            os.write(2, f"{DYNAMO_MARK}{code.co_filename}\t{tx.lineno}\t{code.co_name}\n".encode())
    except Exception:  # noqa: BLE001 - a hint for a message: never an error in the worker
        pass


def serve(conn: Connection, config: dict) -> None:
    """Entry point of the worker process (see the module docstring); never returns normally."""
    _harden(conn, config)
    from grader import sandbox
    from grader.exercises import exercise_ids, part

    for exercise in exercise_ids():  # already imported where the fork server preloaded them
        part(exercise, "probes")

    policy = sandbox.Policy(
        **{k: ([Path(p) for p in v] if isinstance(v, list) else Path(v)) for k, v in config["policy"].items()}
    )
    report = sandbox.Report(**config["sandbox"])
    sandbox.enter(policy, report)  # raises SandboxError: the judge sees the process die and says why

    from coursekit.profile import apply_threads, get_profile
    from grader import probing
    from grader.loader import load_cells
    from grader.pinned import Pinned
    from grader.protocol import ProtocolError, pack, recv_frame, send_frame, unpack

    profile = get_profile(config["profile"], config["device"])
    apply_threads(profile)
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1  # the fork server read its own environment; compile in-process here
    state: dict = {}
    namespace: dict = {}
    pinned = Pinned.now()  # torch's defaults and Dynamo's default stance: no learner code has run yet

    fd = conn.fileno()

    def answer(rid: int, reply: probing.Reply | None = None, error: BaseException | None = None) -> None:
        if error is None:
            data = pack({"id": rid, "ok": True, "values": reply.values}, reply.tensors)
        else:
            data = pack({"id": rid, "ok": False, "error": probing.describe_error(error)})
        send_frame(fd, data)

    while True:
        try:
            header, tensors = unpack(recv_frame(fd))
        except (EOFError, OSError, ProtocolError):
            os._exit(0)
        rid = header.get("id", -1)
        if header.get("op") == "exit":
            os._exit(0)
        if header.get("op") == "load":
            loaded = load_cells(header["cells"])
            namespace = loaded.namespace
            if note := pinned.loaded():
                loaded.problems.append(note)
            send_frame(fd, pack({"id": rid, "ok": True, "values": {"problems": loaded.problems}}))
            continue
        needs = header.get("needs")
        allowed = frozenset(map(str, needs)) if isinstance(needs, list) else None
        call = probing.Call(namespace, header.get("args") or {}, tensors, profile.device, state, allowed)
        if header.get("probe") not in probing.PROBES:
            answer(
                rid,
                error=probing.Failure(
                    f"this grading worker has no probe {header.get('probe')!r}: the grader's installation is incomplete"
                ),
            )
            continue
        pinned.restore()  # what loading or an earlier probe changed does not carry into this one
        try:
            reply = probing.run(header["probe"], call)
        except Exception as exc:  # noqa: BLE001 - learner code may raise anything: report it
            answer(rid, error=exc)
        else:
            if moved := pinned.moved():
                answer(rid, error=probing.Failure(moved))
                continue
            try:
                answer(rid, reply)
            except Exception as exc:  # noqa: BLE001 - an answer that cannot be encoded is the learner's failure
                answer(rid, error=probing.Failure(f"the result could not be sent to the grader: {exc}"))
