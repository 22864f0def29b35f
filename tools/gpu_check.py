"""``make gpu-check``: the whole course on a CUDA GPU, in steps that resume, into one results folder.

Each step runs in its own process under a time limit and records its status in ``steps.json``:

* ``env``: versions, ``nvidia-smi``, the sandbox this machine offers, what the traffic watch counts in known cases;
* ``grade-exNN``: grade exercise NN's reference solution (``solutions/``) with the isolated grader;
* ``sandbox``: ``python -m tools.sandbox_cuda``, which of the worker sandbox's layers (alone, or relaxed) let CUDA
  start: whether CUDA workers still need their exceptions (UNIX datagram sockets);
* ``lesson-NN``: execute lesson NN's notebook (the executed copy, outputs and all, lands in ``notebooks/``);
* ``calibrate``: ``python -m grader calibrate`` (the file it writes is copied into the results);
* ``bench-NN``: lesson NN's ``python -m coursekit.bench``;
* ``solution-NN``: execute exercise NN's reference solution notebook (public checks in the kernel);
* ``wrong-exNN/<name>``: grade one deliberately wrong submission of exercise NN
  (``grader/exercises/exNN/submissions.py``) and compare the checks it failed with the ones it must fail; a step
  each, so a call's budget cuts one grading, not an exercise's dozen (``wrong-ex05*`` picks an exercise's).

Steps that finished (``ok`` or ``failed``) are skipped when the command runs again; a step cut short by the
call's ``--budget-s`` is run again, one that ran out of its own ``--step-limit-s`` is not (``--redo`` forces it).
So a GPU lent in calls of at most ten minutes runs the course in several calls: bring the results folder back
after each (``--pack``), commit it, and the next call carries on where this one stopped.

The lessons, exercises and benches are discovered (``coursekit.lessons``); nothing here names one.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DONE = ("ok", "failed", "timeout")


@dataclass(frozen=True)
class Step:
    """One resumable unit of work: a name and the command that does it."""

    name: str
    argv: tuple[str, ...]
    what: str
    verdict: Path | None = None  # a notebook step's verdict file (``execute_step`` writes it)


def verdict_file(dest: Path, notebook: Path) -> Path:
    """Where ``execute_step`` writes the one-line verdict of ``notebook`` executed into ``dest``."""
    return dest / f"{notebook.stem}.json"


def all_steps(out: Path) -> list[Step]:
    """Every step, in the order that gives the most per minute of GPU time: grading and calibration data first."""
    from coursekit.lessons import lessons

    py, me = sys.executable, "tools.gpu_check"
    found = [
        Step("env", (py, "-m", me, "env", str(out)), "versions, nvidia-smi, sandbox, traffic facts"),
    ]
    for lesson in lessons():
        nb = ROOT / "solutions" / lesson.exercise
        if nb.is_file():
            argv = (py, "-m", "grader", str(nb), "--report", str(out / "grades" / f"{lesson.id}.json"), "--no-progress")
            found.append(Step(f"grade-{lesson.id}", argv, f"grade the reference solution {nb.name}"))
    sandbox_step = (py, "-m", "tools.sandbox_cuda")
    found.append(Step("sandbox", sandbox_step, "which sandbox layers let CUDA, cuBLAS, Triton and NVRTC work"))
    for lesson in lessons():
        nb = ROOT / "notebooks" / lesson.notebook
        argv = (py, "-m", me, "execute", str(nb), str(out / "notebooks"))
        found.append(Step(f"lesson-{lesson.number:02d}", argv, nb.name, verdict_file(out / "notebooks", nb)))
    found.append(Step("calibrate", (py, "-m", me, "calibrate", str(out)), "speed thresholds from the references"))
    for lesson in lessons():
        if lesson.bench:
            argv = (py, "-m", "coursekit.bench", "--lesson", str(lesson.number), "--out", str(out / "bench"))
            found.append(Step(f"bench-{lesson.number:02d}", argv, f"make bench, lesson {lesson.number}"))
    for lesson in lessons():
        nb = ROOT / "solutions" / lesson.exercise
        if nb.is_file():
            argv = (py, "-m", me, "execute", str(nb), str(out / "solutions"), "--public")
            found.append(Step(f"solution-{lesson.number:02d}", argv, nb.name, verdict_file(out / "solutions", nb)))
    from coursekit.results import slug
    from tests.submissions import EXERCISES

    for exercise, (_, _, wrong) in EXERCISES.items():
        for name in wrong:
            argv = (py, "-m", me, "wrong", exercise, str(out / "wrong"), name)
            found.append(Step(f"wrong-{exercise}/{slug(name)}", argv, f"{exercise}, wrong: {name}"))
    return found


# ---------------------------------------------------------------- the runner


def default_out(profile: str | None) -> Path:
    """``bench/results/gpu-check-<device>-<profile>-torch<version>/``: one folder per machine kind and torch."""
    import torch

    from coursekit.profile import device_name, get_profile
    from coursekit.results import slug

    p = get_profile(profile)
    return RESULTS / f"gpu-check-{slug(device_name(p.device))}-{p.name}-torch{slug(torch.__version__)}"


def _load_state(out: Path) -> dict:
    path = out / "steps.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _save_state(out: Path, state: dict) -> None:
    (out / "steps.json").write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    lines = ["# make gpu-check: steps", "", "| step | status | wall | what |", "| --- | --- | --- | --- |"]
    for name, rec in state.items():
        lines.append(f"| {name} | {rec['status']} | {rec.get('wall_s', 0):.0f} s | {rec.get('what', '')} |")
    (out / "steps.md").write_text("\n".join(lines) + "\n")


def _run_step(step: Step, limit_s: float, log: Path, env: dict[str, str]) -> tuple[str, int | None, float]:
    """Run ``step`` in its own process group; ``(status, return code, seconds)``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with log.open("w") as sink:
        sink.write(f"$ {' '.join(step.argv)}\n")
        sink.flush()
        proc = subprocess.Popen(
            step.argv, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)  # a notebook step writes what it ran so far
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            sink.write(f"\n[gpu-check] stopped after {limit_s:.0f} s\n")
            return "killed", None, time.monotonic() - start
    return ("ok" if rc == 0 else "failed"), rc, time.monotonic() - start


def finished_before_cut(step: Step, since: float) -> bool:
    """True if a notebook step stopped by its limit had already run every code cell without an error, by the verdict
    it wrote after ``since`` (a ``time.time()``): on the H200 run, lesson 4's limit came while its kernel shut down,
    and the step would have run again in the next call for nothing."""
    if step.verdict is None or not step.verdict.is_file() or step.verdict.stat().st_mtime < since:
        return False
    record = json.loads(step.verdict.read_text())
    return record.get("verdict") == "ok" and record.get("cells_run") == record.get("code_cells")


def run(args: argparse.Namespace) -> int:
    out: Path = args.out or default_out(args.profile)
    out.mkdir(parents=True, exist_ok=True)
    state = _load_state(out)
    steps = all_steps(out)
    if args.list:
        for s in steps:
            print(f"{s.name:18} {state.get(s.name, {}).get('status', 'pending'):8} {s.what}")
        return 0
    wanted = steps if not args.steps else []  # in the order of --steps' patterns
    for pattern in args.steps:
        wanted += [s for s in steps if fnmatch.fnmatch(s.name, pattern) and s not in wanted]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    if args.profile:
        env["COURSEKIT_PROFILE"] = args.profile
    deadline = time.monotonic() + args.budget_s
    for step in wanted:
        rec = state.get(step.name, {})
        redo = any(fnmatch.fnmatch(step.name, p) for p in args.redo)
        if rec.get("status") in DONE and not redo:
            continue
        left = deadline - time.monotonic()
        if left < args.min_start_s:
            print(f"[gpu-check] budget spent: {step.name} and later steps wait for the next call", flush=True)
            break
        limit = min(args.step_limit_s, left)
        print(f"[gpu-check] {step.name}: {step.what} (limit {limit:.0f} s)", flush=True)
        started, since = datetime.now(UTC).isoformat(timespec="seconds"), time.time()
        status, rc, wall = _run_step(step, limit, out / "logs" / f"{step.name}.log", env)
        if status == "killed" and finished_before_cut(step, since):
            status = "ok"  # every cell ran; the limit came while the kernel shut down
        if status == "killed":  # cut by this call's budget: try again next call; by its own limit: give up
            status = "timeout" if limit >= args.step_limit_s else "cut"
        state[step.name] = {"status": status, "rc": rc, "wall_s": round(wall, 1), "limit_s": round(limit),
                            "started": started, "what": step.what}  # fmt: skip
        _save_state(out, state)
        print(f"[gpu-check] {step.name}: {status} in {wall:.0f} s", flush=True)
    if args.pack:
        args.pack.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(args.pack, "w:gz") as tar:
            tar.add(out, arcname=out.name)
        print(f"[gpu-check] packed {out} into {args.pack} ({args.pack.stat().st_size / 1e6:.1f} MB)")
    pending = [s.name for s in wanted if state.get(s.name, {}).get("status") not in DONE]
    print(f"[gpu-check] {len(wanted) - len(pending)}/{len(wanted)} steps done; pending: {', '.join(pending) or '-'}")
    return 0


# ---------------------------------------------------------------- the steps' own commands


def env_step(out: Path) -> int:
    """Write ``env.json`` (versions, GPU, sandbox) and ``nvidia-smi.txt``."""
    import torch

    from grader import cgroups, sandbox

    info: dict = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cpu_count": os.cpu_count(),
        "sandbox": f"{sandbox.probe().describe()}; {cgroups.describe()}",
    }
    for name in ("torchvision", "timm", "triton", "numpy", "nbclient", "nbformat", "ipykernel", "matplotlib"):
        try:
            info[name] = __import__(name).__version__
        except Exception as exc:  # noqa: BLE001 - record what is missing
            info[name] = f"missing ({type(exc).__name__})"
    # lesson 5 runs tlparse from PATH: a `pip install --target` puts it in <target>/bin, which PATH lacks
    info["tlparse"] = shutil.which("tlparse") or "missing from PATH (lesson 5 skips its report)"
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        free, total = torch.cuda.mem_get_info()
        info["gpu"] = {
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count,
            "memory_gib": round(total / 2**30, 1),
            "free_gib": round(free / 2**30, 1),
            "bf16_supported": torch.cuda.is_bf16_supported(),
            "tf32_matmul_default": torch.backends.cuda.matmul.allow_tf32,
        }
    try:
        info["traffic"] = traffic_facts("cuda" if torch.cuda.is_available() else "cpu")
    except Exception as exc:  # noqa: BLE001 - a profiler that fails here must not cost the versions and nvidia-smi
        info["traffic"] = f"failed: {type(exc).__name__}: {exc}"[:500]
    (out / "env.json").write_text(json.dumps(info, indent=2) + "\n")
    smi = shutil.which("nvidia-smi")
    if smi:
        text = subprocess.run([smi], capture_output=True, text=True).stdout
        text += subprocess.run([smi, "-q"], capture_output=True, text=True).stdout
        (out / "nvidia-smi.txt").write_text(text)
    print(json.dumps(info, indent=2))
    return 0


def traffic_facts(device: str) -> dict[str, dict]:
    """What ``coursekit.traffic.watch_traffic`` counts on ``device`` for cases whose answer is known: a read on the
    host (``.item()``: one sync), a tensor made from Python data (one host-built tensor; on CUDA a pageable copy that
    also waits) and, on CUDA, a ``non_blocking`` copy into pinned memory (no sync: ``sync_waits`` assumes so, not yet
    checked on a GPU) and one into pageable memory (one sync: the copy waits)."""
    import torch

    from coursekit.traffic import watch_traffic

    x = torch.ones(4, device=device)
    cases = {
        "item": lambda: x.sum().item(),
        "a tensor from Python data": lambda: torch.tensor([1.0, 2.0], device=device),
    }
    if torch.device(device).type == "cuda":
        pinned = torch.empty(4, pin_memory=True)
        pageable = torch.empty(4)
        cases["non_blocking copy into pinned memory"] = lambda: pinned.copy_(x, non_blocking=True)
        cases["non_blocking copy into pageable memory"] = lambda: pageable.copy_(x, non_blocking=True)
    facts = {}
    for name, case in cases.items():
        case()  # warm: the first call of an operator may do one-off work
        with watch_traffic(device) as seen:
            case()
        facts[name] = {"syncs": seen.sync_count, "host_tensors": seen.host_tensor_count, "summary": seen.summary()}
    return facts


def execute_step(notebook: Path, dest: Path, public: bool) -> int:
    """Execute ``notebook`` top to bottom; write the executed copy to ``dest/`` even when a cell fails or the
    step is interrupted, and a one-line verdict to ``dest/<name>.json``."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    from grader.notebook import SCOPE_ENV

    if public:
        os.environ[SCOPE_ENV] = "public"
    nb = nbformat.read(notebook, as_version=4)
    dest.mkdir(parents=True, exist_ok=True)
    resources = {"metadata": {"path": str(ROOT)}}
    client = NotebookClient(nb, timeout=None, kernel_name="python3", shutdown_kernel="immediate", resources=resources)
    start, verdict = time.monotonic(), "ok"
    try:
        client.execute()
    except CellExecutionError as exc:
        verdict = f"error: {str(exc).strip().splitlines()[-1][:300]}"
    except KeyboardInterrupt:
        verdict = "interrupted (time limit)"
    finally:
        nbformat.write(nb, dest / notebook.name)
        cells = [c for c in nb.cells if c.cell_type == "code"]
        ran = sum(1 for c in cells if c.get("execution_count"))
        if verdict == "ok" and ran < len(cells):  # stopped between cells (the time limit)
            verdict = f"stopped after {ran} of {len(cells)} code cells"
        record = {"notebook": notebook.name, "verdict": verdict, "cells_run": ran, "code_cells": len(cells),
                  "wall_s": round(time.monotonic() - start, 1)}  # fmt: skip
        verdict_file(dest, notebook).write_text(json.dumps(record, indent=2) + "\n")
        print(json.dumps(record))
    return 0 if verdict == "ok" else 1


def calibrate_step(out: Path, runs: int) -> int:
    """``python -m grader calibrate`` writing straight into ``out/calibration/``, one exercise at a time, so that a
    call's time limit keeps what was measured; checks already there with ``runs`` runs are not measured again."""
    import tomllib

    from coursekit.profile import get_profile
    from grader.context import calibration_name
    from grader.registry import load_all

    folder = out / "calibration"
    done: set[str] = set()
    target = folder / calibration_name(get_profile())
    if target.is_file():
        done = {cid for cid, e in tomllib.loads(target.read_text()).get("checks", {}).items() if len(e["runs"]) >= runs}
    todo = sorted(cid for cid, c in load_all().items() if c.kind == "speed" and cid not in done)
    if not todo:
        print(f"calibrate: every speed check already has {runs} run(s) in {target}")
        return 0
    argv = [sys.executable, "-m", "grader", "calibrate", "--runs", str(runs), "--out", str(folder)]
    return subprocess.call(argv + ["--only", ",".join(todo)], cwd=ROOT)


def as_expected(checks: list[dict], must_fail: set[str]) -> tuple[bool, set[str], dict[str, bool]]:
    """Whether a wrong submission's report (``checks``) failed exactly ``must_fail``, judged as
    ``tests/test_grader.py`` judges it: a speed check only where the submission must fail it; elsewhere its outcome
    is a measurement (a broken answer may still be fast, and a broken protocol fails every check), reported apart.
    Also returns the checks it failed and ``{id: passed}`` for the speed checks not judged."""
    failed = {c["id"] for c in checks if not c["passed"]}
    judged = {c["id"] for c in checks if c["kind"] != "speed" or c["id"] in must_fail}
    measured = {c["id"]: c["passed"] for c in checks if c["id"] not in judged}
    return failed & judged == must_fail, failed, measured


def wrong_step(exercise: str, dest: Path, only: str | None = None) -> int:
    """Grade each wrong submission of ``exercise`` (or the one named ``only``); each must fail exactly the checks it
    names. The verdicts join ``dest/<exercise>.json``, which keeps those of earlier steps."""
    from coursekit.results import slug
    from tests.submissions import EXERCISES, variant

    solution, _, wrong = EXERCISES[exercise]
    if only is not None and only not in wrong:
        print(f"exercise {exercise} has no wrong submission named {only!r}", file=sys.stderr)
        return 2
    summary = dest / f"{exercise}.json"
    results, bad = json.loads(summary.read_text()) if summary.is_file() else {}, 0
    for name, (edits, must_fail) in wrong.items():
        if only is not None and name != only:
            continue
        folder = dest / exercise / slug(name)
        nb = variant(solution, folder / solution.name, edits)
        report = folder / "report.json"
        subprocess.call([sys.executable, "-m", "grader", str(nb), "--report", str(report), "--no-progress"], cwd=ROOT)
        checks = json.loads(report.read_text())["checks"] if report.is_file() else []
        ok, failed, measured = as_expected(checks, set(must_fail))
        bad += not ok
        results[name] = {"as_expected": ok, "failed": sorted(failed), "must_fail": sorted(must_fail)}
        results[name]["speed_measured"] = measured
        extra = f" (speed, not judged: {measured})" if measured else ""
        print(f"{'ok ' if ok else 'BAD'} {name}: failed {sorted(failed)}{extra}", flush=True)
        summary.write_text(json.dumps(results, indent=2) + "\n")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    commands = {"env", "execute", "calibrate", "wrong"}
    if argv and argv[0] in commands:  # the steps' own commands, run by the runner in child processes
        cmd, rest = argv[0], argv[1:]
        if cmd == "env":
            return env_step(Path(rest[0]))
        if cmd == "execute":
            return execute_step(Path(rest[0]), Path(rest[1]), "--public" in rest)
        if cmd == "calibrate":
            return calibrate_step(Path(rest[0]), int(os.environ.get("GPU_CHECK_RUNS", "3")))
        return wrong_step(rest[0], Path(rest[1]), rest[2] if len(rest) > 2 else None)
    parser = argparse.ArgumentParser(prog="python -m tools.gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="results folder (default: bench/results/gpu-check-<device>-...)")
    parser.add_argument("--steps", nargs="*", default=[], help="only these steps (names or globs: lesson-*)")
    parser.add_argument("--redo", nargs="*", default=[], help="run these steps again even if they finished")
    parser.add_argument("--budget-s", type=float, default=float("inf"), help="stop starting steps after this long")
    parser.add_argument("--step-limit-s", type=float, default=570.0, help="one step's own time limit")
    parser.add_argument("--min-start-s", type=float, default=45.0, help="start no step with less budget left")
    parser.add_argument("--profile", help="COURSEKIT_PROFILE for every step (default: full on CUDA)")
    parser.add_argument("--pack", type=Path, help="also pack the results folder into this .tar.gz")
    parser.add_argument("--list", action="store_true", help="list the steps and their status, run nothing")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
