"""``python -m tools.sandbox_cuda``: which layer of the grader's sandbox, if any, keeps CUDA work from a worker.

Each trial forks a child from this process (as the grader's fork server does, after ``import torch`` and before any
CUDA call), applies some of the worker's layers (its environment, dropping root's capabilities, Landlock with the
worker's policy or a wider one, seccomp with or without UNIX datagram sockets, or with some refused calls allowed)
and then runs what a grading does on a GPU, stage by stage: the driver's start (``cuInit``), one kernel, a cuBLAS
matmul, a function compiled by Inductor (Triton's compiler, its ``ptxas`` subprocess and its cache files, in the
trial's scratch folder), and one NVRTC kernel (a jiterator function). One line per trial names the first stage
that failed and why.

The trials that always run answer the open questions (``bench/results/gpu-check-*/README.md``): ``worker`` is a
grading worker's whole sandbox (``grader.sandbox.enter``), ``seccomp-dgram`` its seccomp filter alone, and
``seccomp`` that filter with UNIX datagram sockets refused too, as CPU workers have them (if it passes every stage,
CUDA workers need not keep the exception). Only where ``worker`` fails does the ladder run: each layer alone, the
filter with the IPC calls or ``sched_setaffinity`` allowed, and Landlock widened one folder at a time.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch  # noqa: F401 - imported before forking, like the fork server

from grader import sandbox
from grader.worker import worker_environment
from grader.worker_start import policy_for

IPC = ("shmget", "shmat", "shmctl", "msgget", "msgsnd", "msgctl", "semget", "semop", "semtimedop", "semctl", "ipc")
IPC += ("mq_open", "mq_timedsend", "mq_notify", "mq_getsetattr")
WIDER = ("/proc", "/sys", "/run", "/var", "/tmp", "/dev/shm", "/root", "/etc", "/usr", "/opt", "/home")


def _landlock_variant(policy: sandbox.Policy, abi: int, layers: set[str]) -> None:
    """The worker's Landlock rules, or a variant: ``no-scope``, ``no-net``, ``full:/path`` (every right under it)."""
    full = [Path(x[5:]) for x in layers if x.startswith("full:")]
    sandbox._landlock(policy, abi, full=full, scope="no-scope" not in layers, net="no-net" not in layers)


def _stages(scratch: Path) -> list[tuple[str, Callable[[], object]]]:
    """What a grading does on a GPU, in order; each stage returns something small to print."""

    def compiled() -> float:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(scratch / "inductor")  # writable under every trial's Landlock
        os.environ["TRITON_CACHE_DIR"] = str(scratch / "triton")
        fn = torch.compile(lambda x: torch.nn.functional.gelu(x) * 2 + 1, backend="inductor")
        return float(fn(torch.ones(64, device="cuda")).sum())

    def nvrtc() -> float:
        double = torch.cuda.jiterator._create_jit_fn("template <typename T> T twice(T x) { return x * 2; }")
        return float(double(torch.ones(4, device="cuda")).sum())

    return [
        ("init", lambda: (torch.cuda.init(), torch.cuda.get_device_name())[1]),
        ("kernel", lambda: float(torch.ones(4, device="cuda").sum())),
        ("matmul", lambda: float((torch.ones(64, 64, device="cuda") @ torch.ones(64, 64, device="cuda")).sum())),
        ("compile", compiled),
        ("nvrtc", nvrtc),
    ]


def trial(layers: set[str], stages: Callable[[Path], list[tuple[str, Callable[[], object]]]] = _stages) -> dict:
    """Apply ``layers`` in a forked child, then run ``stages(scratch)`` until one raises: what passed, what failed."""
    scratch = Path(tempfile.mkdtemp(prefix="cuda-trial-"))
    policy = policy_for(scratch, "cuda")
    report = sandbox.probe()

    def body() -> dict:
        out: dict = {"passed": []}
        stage = "sandbox"
        try:
            if "env" in layers:
                env = worker_environment(dict(os.environ), scratch)
                os.environ.clear()
                os.environ.update(env)
            if "worker" in layers:
                sandbox.enter(policy, report)
            if "caps" in layers and os.geteuid() == 0:
                sandbox._drop_capabilities()
            if "landlock" in layers:
                _landlock_variant(policy, report.landlock_abi, layers)
            if "seccomp" in layers:
                for layer in layers:
                    if layer.startswith("allow:"):
                        names = set(layer[6:].split(","))
                        sandbox.DENIED = tuple(n for n in sandbox.DENIED if n not in names)
                if "no-clone-rules" in layers:
                    sandbox.NAMESPACE_FLAGS = 0
                sandbox._seccomp(report.landlock_abi, datagrams="datagrams" in layers)
            for stage, run in stages(scratch):
                start = time.perf_counter()
                value = run()
                out["passed"].append(f"{stage} {time.perf_counter() - start:.1f}s")
                if stage == "init":
                    out["gpu"] = value
            out["ok"] = True
        except BaseException as exc:  # noqa: BLE001 - report it
            out["ok"] = False
            out["failed"] = stage
            out["error"] = f"{type(exc).__name__}: {exc}"[:400]
            out["where"] = traceback.format_exc().splitlines()[-3:]
        return out

    return sandbox.in_forked_child(body) or {"ok": False, "error": "child died"}


def trials(ladder: bool) -> list[tuple[str, set[str]]]:
    """The trials to run: the three questions, then (``ladder``, where ``worker`` failed) one layer at a time."""
    first = [
        ("nothing", set()),
        ("worker", {"env", "worker"}),
        ("seccomp-dgram", {"seccomp", "datagrams"}),
        ("seccomp", {"seccomp"}),
    ]
    if not ladder:
        return first
    return [
        ("env", {"env"}),
        ("caps", {"caps"}),
        ("landlock", {"landlock"}),
        ("sec-allow-ipc", {"seccomp", "datagrams", "allow:" + ",".join(IPC)}),
        ("sec-allow-affinity", {"seccomp", "datagrams", "allow:sched_setaffinity"}),
        ("sec-no-clone-rules", {"seccomp", "datagrams", "no-clone-rules"}),
        *[(f"ll-full-{p}", {"landlock", f"full:{p}"}) for p in WIDER],
    ]


def main() -> int:
    print("devices:", sorted(str(p) for p in Path("/dev").glob("nvidia*")))
    print("sandbox:", sandbox.probe().describe())
    print("uid:", os.geteuid(), "LD_LIBRARY_PATH:", os.environ.get("LD_LIBRARY_PATH"))
    results = {}
    for ladder in (False, True):
        if ladder and results.get("worker", {}).get("ok", True):
            break
        for name, layers in trials(ladder):
            results[name] = trial(layers)
            print(f"{name:20} {json.dumps(results[name])}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
