"""How the judge starts a grading worker: an environment without secrets, a ``__main__`` the worker will not
import, the start method (a fork server that imported torch once), and the sandbox policy that says what the
worker may read."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from grader import sandbox

START_METHOD_ENV = "GRADER_START_METHOD"  # "forkserver" (default where available) or "spawn"
PRELOAD = ["grader.preload"]  # what the fork server imports once
SECRET_ENV = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|ACCESS_KEY|PRIVATE|^GRADER_", re.IGNORECASE)
ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def scrubbed_environ() -> Iterator[None]:
    """No secret in this process's environment while it starts a process (which copies it, and which a worker
    could read back from its own ``/proc/self/environ``)."""
    saved = {k: v for k, v in os.environ.items() if SECRET_ENV.search(k)}
    for k in saved:
        del os.environ[k]
    try:
        yield
    finally:
        os.environ.update(saved)


@contextlib.contextmanager
def main_not_imported() -> Iterator[None]:
    """While a worker starts, this process's ``__main__`` names no module and no file, so the worker does not
    import it (``multiprocessing`` would, as ``__mp_main__``): a script that calls ``grade_notebook`` without an
    ``if __name__ == "__main__":`` guard ran again inside every worker it started, which then never answered,
    and every check failed after 240 s on "loading the notebook"; and no code of the judge's should run where
    learner code does."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved = {k: main.__dict__[k] for k in ("__spec__", "__file__") if k in main.__dict__}
    main.__spec__ = None
    main.__dict__.pop("__file__", None)
    try:
        yield
    finally:
        main.__dict__.update(saved)
        if "__spec__" not in saved:
            main.__dict__.pop("__spec__", None)


def worker_context() -> mp.context.BaseContext:
    """Workers fork from a server that imported torch, timm and the probes once (``forkserver``), or start from
    scratch (``spawn``, ``GRADER_START_METHOD=spawn``). The server imports modules and runs nothing else."""
    method = os.environ.get(START_METHOD_ENV) or (
        "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
    )
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(PRELOAD)
    return ctx


def _worker_modules() -> list[Path]:
    """The grader's files a worker may read: its own code and the probes and contracts (public in the kit)."""
    grader = ROOT / "grader"
    files = [
        grader / n
        for n in (
            "__init__.py",
            "protocol.py",
            "worker.py",
            "loader.py",
            "sandbox.py",
            "probing.py",
            "notebook.py",
            "numbers.py",
            "numerics.py",
            "pinned.py",
            "stance.py",
            "quiet.py",
            "preload.py",
        )
    ]
    exercises = grader / "exercises"
    files.append(exercises / "__init__.py")
    for folder in sorted(exercises.glob("ex[0-9][0-9]")):
        files += [folder / n for n in ("__init__.py", "probes.py", "contract.py")]
    return [f for f in files if f.exists()]


def policy_for(scratch: Path, device: str) -> sandbox.Policy:
    """What a worker may touch: its scratch folder, the Python installation, ``coursekit/`` and the grader's
    worker-side modules; nothing else of the repository (solutions, hidden checks, references, thresholds,
    calibration, reports, submissions)."""
    execute, read = sandbox.default_read_paths([ROOT / "coursekit", *_worker_modules()])
    devices = [Path(p) for p in ("/dev/null", "/dev/zero", "/dev/full")]
    if device.startswith("cuda"):
        devices += sorted(Path("/dev").glob("nvidia*")) + [Path("/dev/dri")]
        read += [Path("/proc/driver/nvidia")]
    return sandbox.Policy(scratch=scratch, read=read, list_only=[ROOT / "grader"], execute=execute, devices=devices)
