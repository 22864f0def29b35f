"""``python -m tools.sandbox_cuda``: which layer of the grader's sandbox, if any, keeps CUDA from a worker.

Each trial forks a child from this process (as the grader's fork server does, after ``import torch`` and
before any CUDA call), applies some of the worker's layers (its environment, dropping root's capabilities,
Landlock with the worker's policy or a wider one, seccomp) and then initialises CUDA and runs one kernel.
One line per trial says what happened, so a GPU machine where graded workers see no CUDA shows the culprit.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
from pathlib import Path

import torch  # noqa: F401 - imported before forking, like the fork server

from grader import sandbox
from grader.learner import policy_for
from grader.worker import worker_environment

EXTRA = {  # paths a CUDA driver may want beyond the worker's policy, tried one group at a time
    "run": ["/run", "/var/run"],
    "tmp": ["/tmp", "/dev/shm"],
    "dev": ["/dev"],
    "root": ["/"],
}


def _trial(layers: set[str], extra: list[str]) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="cuda-trial-"))
    policy = policy_for(scratch, "cuda")
    policy.read += [Path(p) for p in extra]
    policy.devices += [Path(p) for p in extra if p == "/dev"]
    report = sandbox.probe()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        out: dict = {}
        try:
            if "env" in layers:
                env = worker_environment(dict(os.environ), scratch)
                os.environ.clear()
                os.environ.update(env)
            if "caps" in layers and os.geteuid() == 0:
                sandbox._drop_capabilities()
            if "landlock" in layers:
                sandbox._landlock(policy, report.landlock_abi)
            if "seccomp" in layers:
                sandbox._seccomp(report.landlock_abi)
            import warnings

            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out["available"] = torch.cuda.is_available()
            out["warnings"] = [str(w.message)[:300] for w in caught]
            torch.cuda.init()
            out["sum"] = float(torch.ones(4, device="cuda").sum())
            out["ok"] = True
        except BaseException as exc:  # noqa: BLE001 - report it
            out["ok"] = False
            out["error"] = f"{type(exc).__name__}: {exc}"[:400]
            out["where"] = traceback.format_exc().splitlines()[-3:]
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.waitpid(pid, 0)
    return json.loads(data or b'{"ok": false, "error": "child died"}')


def main() -> int:
    print("devices:", sorted(str(p) for p in Path("/dev").glob("nvidia*")))
    print("sandbox:", sandbox.probe().describe())
    print("uid:", os.geteuid(), "LD_LIBRARY_PATH:", os.environ.get("LD_LIBRARY_PATH"))
    trials = [
        ("nothing", set(), []),
        ("env", {"env"}, []),
        ("caps", {"caps"}, []),
        ("seccomp", {"seccomp"}, []),
        ("landlock", {"landlock"}, []),
        *[(f"landlock+{name}", {"landlock"}, paths) for name, paths in EXTRA.items()],
        ("all layers", {"env", "caps", "landlock", "seccomp"}, []),
    ]
    for name, layers, extra in trials:
        result = _trial(layers, extra)
        print(f"{name:16} {json.dumps(result)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
