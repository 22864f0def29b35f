"""``python -m grader calibrate`` (``make calibrate``): speed thresholds for this machine.

Grades each reference solution (``solutions/NN_*.ipynb``) on its speed checks
``--runs`` times, in fresh grading processes with different secret seeds, exactly as
learners are graded: the grader's own baseline against the reference, interleaved, in
the same run.  For each speed check it records every run, the median and the spread,
and sets

    required = 1 + fraction * (median - 1)

that is, a stated fraction (``--fraction``, default 0.25) of the speedup the reference
gains on this device.  (A fraction of the speedup itself would fall below 1x for a
check whose reference gains less than the fraction's inverse.)  The file is named by
device model, profile and torch version, e.g.
``grader/calibration/cpu-amd-epyc-smoke-torch2.14.1-cu130.toml``; the grader uses it
on a matching machine and falls back to ``grader/thresholds.toml`` elsewhere (see
``grader.context``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import torch

from coursekit.profile import get_profile
from grader.context import CALIBRATION_DIR, Context, calibration_name, cpu_model, device_model, load_thresholds, slug
from grader.interface import NOTEBOOKS
from grader.registry import load_all
from grader.runner import grade_notebook

DEFAULT_FRACTION = 0.25
SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"


def required_from(median: float, fraction: float) -> float:
    """The threshold: ``fraction`` of the reference's gain over the baseline, never below 1.01x."""
    return round(max(1.01, 1 + fraction * (median - 1)), 2)


def measure(
    check_ids: list[str],
    runs: int,
    solutions: Path,
    progress: bool,
    after_each: Callable[[dict[str, list[float]]], None] = lambda measured: None,
) -> dict[str, list[float]]:
    """``{check id: [speedup per run]}`` for the reference solutions, ``runs`` fresh grading runs each;
    ``after_each`` gets what is measured so far after every exercise."""
    profile = get_profile()
    checks = load_all()
    by_exercise: dict[str, list[str]] = {}
    for cid in check_ids:
        by_exercise.setdefault(checks[cid].exercise, []).append(cid)
    measured: dict[str, list[float]] = {cid: [] for cid in check_ids}
    for exercise, ids in sorted(by_exercise.items()):
        notebook = solutions / NOTEBOOKS[exercise]
        if not notebook.is_file():
            raise SystemExit(f"calibrate: no reference solution {notebook}")
        for run in range(runs):
            grade = grade_notebook(notebook, exercise, profile, secret=1000 + 7 * run, check_ids=ids, progress=progress)
            for r in grade.results:
                if r.measured is None:
                    raise SystemExit(
                        f"calibrate: the reference solution did not measure {r.id} (run {run + 1}): {r.message}"
                    )
                measured[r.id].append(float(r.measured))
            print(
                f"  {exercise} run {run + 1}/{runs}: " + ", ".join(f"{r.id} {r.measured:.2f}x" for r in grade.results),
                flush=True,
            )
        after_each({cid: values for cid, values in measured.items() if values})
    return measured


def _toml_value(value) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(round(value, 4)) if isinstance(value, float) else str(value)


def render(
    measured: dict[str, list[float]], fraction: float, runs: int, kept: dict[str, dict] | None = None
) -> tuple[str, list[list[str]]]:
    """The calibration file's text, and rows for the printed summary; ``kept`` entries (checks calibrated
    earlier on this device and not measured now) are carried over unchanged."""
    profile = get_profile()
    defaults = load_thresholds().get(profile.device_class, {})
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    where = (
        f"{device_model(profile)}"
        if profile.device_class == "cuda"
        else f"{cpu_model()} ({cores} cores, {profile.threads} thread(s) while timing)"
    )
    created = datetime.now(UTC).isoformat(timespec="seconds")
    lines = [
        f"# Speed thresholds calibrated on this machine by `make calibrate` ({created}).",
        "# required = 1 + fraction * (median - 1): the stated fraction of the gain the reference solution",
        "# measured over the grader's baseline here; `runs` holds every run, `spread` is max - min.",
        "# The grader uses this file only on a machine with the same device, profile and torch version.",
        "",
        "[calibration]",
    ]
    meta = {
        "device": slug(device_model(profile)),
        "device_name": where,
        "device_class": profile.device_class,
        "profile": profile.name,
        "torch": torch.__version__,
        "runs": runs,
        "fraction": fraction,
        "rule": "required = 1 + fraction * (median - 1)",
        "created": created,
    }
    lines += [f"{k} = {_toml_value(v)}" for k, v in meta.items()]
    rows = []
    for cid, measured_values in measured.items():
        values = [round(v, 3) for v in measured_values]  # what the file records: its spread is max - min of these
        median = statistics.median(values)
        spread = max(values) - min(values)
        required = required_from(median, fraction)
        entry = {
            "required": required,
            "reference": round(median, 3),
            "runs": [round(v, 3) for v in values],
            "min": round(min(values), 3),
            "max": round(max(values), 3),
            "spread": round(spread, 3),
            "relative_spread": round(spread / median, 3) if median else 0.0,
            "measured_on": f"{where}, {profile.name} profile, torch {torch.__version__}; {runs} runs "
            f"{min(values):.2f}-{max(values):.2f}, median {median:.2f}",
        }
        lines += ["", f'[checks."{cid}"]'] + [f"{k} = {_toml_value(v)}" for k, v in entry.items()]
        default = defaults.get(cid, {}).get("required")
        rows.append(
            [
                cid,
                " ".join(f"{v:.2f}" for v in values),
                f"{median:.2f}x",
                f"{spread:.2f}",
                f"{required:.2f}x",
                f"{default:.2f}x" if default else "-",
            ]
        )
    for cid, entry in sorted((kept or {}).items()):
        if cid not in measured:
            lines += ["", f'[checks."{cid}"]'] + [f"{k} = {_toml_value(v)}" for k, v in entry.items()]
    return "\n".join(lines) + "\n", rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader calibrate", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="grading runs per exercise (default 3)")
    parser.add_argument(
        "--fraction",
        type=float,
        default=DEFAULT_FRACTION,
        help=f"fraction of the reference's gain to require (default {DEFAULT_FRACTION})",
    )
    parser.add_argument("--only", help="comma-separated speed check ids (default: all speed checks)")
    parser.add_argument("--out", type=Path, default=CALIBRATION_DIR, help="folder for the file (grader/calibration)")
    parser.add_argument("--solutions", type=Path, default=SOLUTIONS, help="reference solutions (solutions/)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    args = parser.parse_args(argv)
    if not 0 < args.fraction < 1:
        parser.error("--fraction must be between 0 and 1")
    speed = [cid for cid, c in load_all().items() if c.kind == "speed"]
    ids = [c for c in args.only.split(",")] if args.only else speed
    unknown = sorted(set(ids) - set(speed))
    if unknown:
        parser.error(f"not speed checks: {', '.join(unknown)}")
    profile = get_profile()
    target = args.out / calibration_name(profile)
    print(
        f"calibrating {len(ids)} speed check(s) on {device_model(profile)} ({profile.name} profile, torch "
        f"{torch.__version__}), {args.runs} run(s) each",
        flush=True,
    )
    kept = {}
    if target.is_file():  # keep what an earlier run calibrated for other checks (e.g. after --only)
        import tomllib

        kept = tomllib.loads(target.read_text()).get("checks", {})

    def write(measured: dict[str, list[float]]) -> None:  # after every exercise: a cut run keeps what it measured
        text, _ = render(measured, args.fraction, args.runs, kept)
        args.out.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".toml.tmp")
        tmp.write_text(text)
        tmp.replace(target)

    measured = measure(ids, args.runs, args.solutions, not args.no_progress, after_each=write)
    _, rows = render(measured, args.fraction, args.runs, kept)
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"calibration: required = 1 + {args.fraction:g} x (median - 1)")
    for col in ("check", "runs", "median", "spread", "required (calibrated)", "required (default)"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    Console(width=160).print(table)
    print(f"wrote {target}")
    os.environ["GRADER_CALIBRATION"] = str(target)
    print(f"the grader now uses: {Context.create(profile).describe_thresholds()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
