"""How reliably the speed checks separate the reference solutions from the baselines, graded as a class would be.

    python -m tools.speed_trials [--runs 5] [--workers 2]

Builds two "students" in a temporary class folder: ``reference`` (every solution as it is) and ``baseline``
(every solution with its timed part replaced by the naive code the grader times against: the naive loss,
BrokenScorer, an uncompiled train step, a compile per sequence length with the call counter kept, the whole
model compiled). Then grades the folder with ``python -m grader batch --workers N`` on the speed checks only,
``--runs`` times, and writes every measured speedup to ``bench/results/speed-trials-<device>-<profile>-torch<version>.
{json,md}``. Every reference run should pass and every baseline run fail.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def baseline_edits() -> dict[str, dict[str, str]]:
    """``{solution notebook name: edits}`` for every exercise whose ``submissions.py`` has a ``BASELINE``."""
    from grader.exercises import exercise_ids, part

    found = {}
    for exercise in exercise_ids():
        module = part(exercise, "submissions")
        if module is not None and hasattr(module, "BASELINE"):
            found[part(exercise, "contract").NOTEBOOK] = module.BASELINE
    return found


BASELINE_EDITS = baseline_edits()


def baseline_notebook(name: str) -> nbformat.NotebookNode:
    nb = nbformat.read(ROOT / "solutions" / name, as_version=4)
    for old, new in BASELINE_EDITS[name].items():
        if old == "@@append":
            nb.cells.append(nbformat.v4.new_code_cell(new))
            continue
        hits = [c for c in nb.cells if c.cell_type == "code" and old in c.source]
        if len(hits) != 1:
            raise SystemExit(f"{name}: edit {old!r} matches {len(hits)} cells")
        hits[0].source = hits[0].source.replace(old, new)
    return nb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", help="comma-separated speed check ids (default: all)")
    args = parser.parse_args(argv)
    import torch

    from coursekit.profile import get_profile
    from grader.context import device_model, slug
    from grader.registry import load_all

    profile = get_profile()
    speed = [cid for cid, c in load_all().items() if c.kind == "speed" and (not args.only or cid in args.only)]
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="speed-trials-") as tmp:
        folder = Path(tmp) / "class"
        wanted = {f"{int(cid[2:4]):02d}" for cid in speed}
        for name in [n for n in BASELINE_EDITS if n[:2] in wanted]:
            (folder / "reference").mkdir(parents=True, exist_ok=True)
            (folder / "baseline").mkdir(parents=True, exist_ok=True)
            nbformat.write(nbformat.read(ROOT / "solutions" / name, as_version=4), folder / "reference" / name)
            nbformat.write(baseline_notebook(name), folder / "baseline" / name)
        for run in range(args.runs):
            out = Path(tmp) / f"run{run}"
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
                    str(args.workers),
                    "--only",
                    ",".join(speed),
                    "--no-progress",
                ],
                cwd=ROOT,
                capture_output=True,
                text=True,
            )
            if proc.returncode:
                raise SystemExit(f"grader batch failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
            for student in ("reference", "baseline"):
                for report in sorted((out / student).glob("*.json")):
                    for c in json.loads(report.read_text())["checks"]:
                        runs.append(
                            {
                                "run": run + 1,
                                "student": student,
                                "check": c["id"],
                                "passed": c["passed"],
                                "measured": c["measured"],
                                "required": c["required"],
                                "message": c["message"],
                            }
                        )
            print(f"run {run + 1}/{args.runs}: {time.monotonic() - start:.0f} s", flush=True)
    stem = f"speed-trials-{slug(device_model(profile))}-{profile.name}-torch{slug(torch.__version__)}"
    RESULTS.mkdir(parents=True, exist_ok=True)
    meta = {
        "device": device_model(profile),
        "profile": profile.name,
        "torch": torch.__version__,
        "runs": args.runs,
        "workers": args.workers,
        "cores": os.cpu_count(),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    (RESULTS / f"{stem}.json").write_text(json.dumps({**meta, "results": runs}, indent=2) + "\n")
    lines = [
        f"# Speed checks, reference vs baseline, graded as a class ({args.runs} batch runs, --workers {args.workers})",
        "",
        f"{meta['device']}, {os.cpu_count()} cores, profile `{profile.name}`, torch {torch.__version__}, "
        f"{meta['created']}. Written by `tools/speed_trials.py`.",
        "",
        "`no ratio`: failed without a measured speedup: by a precondition (what is timed must be compiled, so a",
        "baseline that leaves it eager is stopped there) or by a wrong value during timing; its message says which.",
        "",
        "| check | required | reference: passed, measured | baseline: passed, measured |",
        "|---|---|---|---|",
    ]
    for cid in speed:
        rows = {s: [r for r in runs if r["check"] == cid and r["student"] == s] for s in ("reference", "baseline")}
        if not rows["reference"]:
            continue
        shown = {
            s: f"{sum(r['passed'] for r in rs)}/{len(rs)}, "
            + " ".join(f"{r['measured']:.2f}" if r["measured"] is not None else "no ratio" for r in rs)
            for s, rs in rows.items()
        }
        lines.append(
            f"| `{cid}` | {rows['reference'][0]['required']:.2f}x | {shown['reference']} | {shown['baseline']} |"
        )
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
