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
from grader.worker import worker_environment
from grader.worker_start import policy_for

EXTRA = {  # paths a CUDA driver may want beyond the worker's policy, tried one group at a time
    "run": ["/run", "/var/run"],
    "tmp": ["/tmp", "/dev/shm"],
    "dev": ["/dev"],
    "root": ["/"],
}


def _landlock_variant(policy: sandbox.Policy, abi: int, layers: set[str]) -> None:
    """The worker's Landlock rules, or a variant: ``no-scope``, ``no-net``, ``full:/path`` (every right under it)."""
    full = [Path(x[5:]) for x in layers if x.startswith("full:")]
    sandbox._landlock(policy, abi, full=full, scope="no-scope" not in layers, net="no-net" not in layers)


def _socket_rule(rule: str) -> None:
    """A second seccomp filter for ``socket`` and ``connect``: ``unix`` (AF_UNIX only), ``netlink``,
    ``errno=N`` (refuse every socket with errno N), ``unix-noconnect`` (AF_UNIX, and connect refused)."""
    import errno

    from seccompy import ArgCmp, CmpOp, Filter, syscall_nr

    filt = Filter()
    sock = syscall_nr("socket")
    if rule.startswith("errno="):
        filt.errno(sock, int(rule[6:]))
    elif rule in ("unix", "unix-noconnect"):
        filt.errno(sock, errno.EPERM, args=[ArgCmp(0, CmpOp.NE, 1)])
        if rule == "unix-noconnect":
            filt.errno(syscall_nr("connect"), errno.ENOENT)
    elif rule == "netlink":
        filt.errno(sock, errno.EPERM, args=[ArgCmp(0, CmpOp.NE, 16)])
    filt.load()


def _trial(layers: set[str], extra: list[str]) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="cuda-trial-"))
    policy = policy_for(scratch, "cuda")
    policy.read += [Path(p) for p in extra]
    policy.devices += [Path(p) for p in extra if p == "/dev"]
    report = sandbox.probe()

    def body() -> dict:
        out: dict = {}
        try:
            if "env" in layers:
                env = worker_environment(dict(os.environ), scratch)
                os.environ.clear()
                os.environ.update(env)
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
                sandbox._seccomp(report.landlock_abi)
                for layer in layers:
                    if layer.startswith("socket:"):
                        _socket_rule(layer[7:])
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
        return out

    return sandbox.in_forked_child(body) or {"ok": False, "error": "child died"}


def main() -> int:
    print("devices:", sorted(str(p) for p in Path("/dev").glob("nvidia*")))
    print("sandbox:", sandbox.probe().describe())
    print("uid:", os.geteuid(), "LD_LIBRARY_PATH:", os.environ.get("LD_LIBRARY_PATH"))
    no_socket_rule = "allow:socket"
    trials = [
        ("nothing", set(), []),
        ("seccomp", {"seccomp"}, []),
        *[
            (f"sec-sock-{r}", {"seccomp", no_socket_rule, f"socket:{r}"}, [])
            for r in ("unix", "unix-noconnect", "netlink", "errno=97", "errno=13", "errno=2")
        ],
        ("landlock", {"landlock"}, []),
        *[
            (f"ll-full-{p}", {"landlock", f"full:{p}"}, [])
            for p in ("/proc", "/sys", "/run", "/var", "/root", "/etc", "/usr", "/opt", "/work", "/home")
        ],
        ("ll-full-proc-sys", {"landlock", "full:/proc", "full:/sys"}, []),
    ]
    for name, layers, extra in trials:
        result = _trial(layers, extra)
        print(f"{name:16} {json.dumps(result)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
