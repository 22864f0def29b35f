"""Measure batch-grading throughput (submissions per minute) on this machine.

    python -m tools.batch_bench [--learners 10] [--workers 1 2]

Generates a class (``--learners`` students, each submitting exercises 1 and 2: correct, partially
correct, untouched and cells-deleted notebooks in turn; no hanging notebook, since a hang costs one
check time-out whatever the machine), grades it with ``python -m grader batch`` for each ``--workers``
value from scratch (``--force``), and records the wall time and submissions per minute in
``bench/results/batch-grading-<device>-<profile>-torch<version>.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import nbformat

from grader.exercises.ex01.submissions import WRONG as WRONG_01
from grader.exercises.ex02.submissions import WRONG as WRONG_02
from tests.classroom_fixtures import filled

ROOT = Path(__file__).resolve().parent.parent

KINDS = ("correct", "partially correct", "untouched", "cells deleted")
NOTEBOOKS = {
    "ex01": ("01_cross_entropy_ladder.ipynb", WRONG_01["wrong reduction (mean over rows)"][0]),
    "ex02": ("02_graph_breaks.ipynb", WRONG_02["a fix that changes results (mean over all rows)"][0]),
}


def make_class(folder: Path, learners: int) -> Counter:
    """``folder/learnerNN/NN_*.ipynb``: two submissions per learner, kinds in turn; returns the mix."""
    mix: Counter = Counter()
    for i in range(learners):
        for j, (exercise, (name, wrong)) in enumerate(NOTEBOOKS.items()):
            kind = KINDS[(i + j) % len(KINDS)]
            if kind == "untouched":
                nb = nbformat.read(ROOT / "exercises" / name, as_version=4)
            else:
                nb = filled(name, wrong if kind == "partially correct" else None)
            if kind == "cells deleted":
                nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "setup"]
            (folder / f"learner{i:02d}").mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, folder / f"learner{i:02d}" / name)
            mix[f"{exercise} {kind}"] += 1
    return mix


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learners", type=int, default=10, help="students, two submissions each (default 10)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="pool sizes to measure")
    args = parser.parse_args(argv)
    import torch

    from coursekit.profile import get_profile
    from grader.context import device_model, slug

    profile = get_profile()
    runs = []
    with tempfile.TemporaryDirectory(prefix="batch-bench-") as tmp:
        folder = Path(tmp) / "class"
        mix = make_class(folder, args.learners)
        total = sum(mix.values())
        for workers in args.workers:
            out = Path(tmp) / f"out-{workers}"
            start = time.monotonic()
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "grader",
                    "batch",
                    str(folder),
                    "--out",
                    str(out),
                    "--workers",
                    str(workers),
                    "--force",
                    "--no-progress",
                ],
                cwd=ROOT,
                capture_output=True,
                text=True,
            )
            wall = time.monotonic() - start
            if proc.returncode:
                raise SystemExit(proc.stdout + proc.stderr)
            reports = [json.loads(p.read_text()) for p in out.glob("*/*.json")]
            per_sub = sorted(r["seconds"] for r in reports)
            runs.append(
                {
                    "workers": workers,
                    "submissions": len(reports),
                    "wall_s": round(wall, 1),
                    "submissions_per_min": round(60 * len(reports) / wall, 2),
                    "median_submission_s": per_sub[len(per_sub) // 2],
                    "max_submission_s": per_sub[-1],
                }
            )
            print(
                f"{workers} worker(s): {len(reports)} submissions in {wall:.0f} s = "
                f"{runs[-1]['submissions_per_min']:.1f} per minute",
                flush=True,
            )
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    doc = {
        "device": profile.device_class,
        "device_name": device_model(profile),
        "profile": profile.name,
        "torch": torch.__version__,
        "cpu_count": cores,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "submissions": total,
        "mix": dict(mix),
        "runs": runs,
        "method": "python -m grader batch --force from scratch; wall time of the whole command (process start, "
        "discovery, grading, reports, CSVs); every check of each exercise, speed checks included",
    }
    stem = (
        ROOT
        / "bench"
        / "results"
        / f"batch-grading-{slug(device_model(profile))}-{profile.name}-torch{slug(torch.__version__)}"
    )
    stem.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{stem}.json").write_text(json.dumps(doc, indent=2) + "\n")
    md = [
        f"# Batch grading throughput ({device_model(profile)}, {cores} cores, {profile.name} profile, "
        f"torch {torch.__version__})",
        "",
        f"{total} submissions ({', '.join(f'{v} {k}' for k, v in sorted(mix.items()))}), every check including "
        "the timed ones, graded from scratch by `python -m grader batch`.",
        "",
        "| workers | wall | submissions/min | median per submission | slowest |",
        "|---|---|---|---|---|",
    ]
    md += [
        f"| {r['workers']} | {r['wall_s']:.0f} s | {r['submissions_per_min']:.1f} | {r['median_submission_s']:.1f} s | "
        f"{r['max_submission_s']:.1f} s |"
        for r in runs
    ]
    Path(f"{stem}.md").write_text("\n".join(md) + "\n")
    print(f"wrote {stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
