"""Reports: a terminal table, a JSON file and a markdown page with a speedup chart."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import torch
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from coursekit.profile import Profile
from grader.numbers import format_value
from grader.registry import instructor_only
from grader.runner import NotebookGrade


def build_report(grades: list[NotebookGrade], profile: Profile, thresholds_used: str) -> dict:
    """The JSON-ready report: device, torch, profile, score, max_score and one entry per check."""
    checks = [r.as_dict() for g in grades for r in g.results]
    return {
        "device": profile.device_class,
        "device_name": profile.as_dict()["device_name"],
        "torch": torch.__version__,
        "profile": profile.name,
        "thresholds": thresholds_used,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "score": sum(c["points"] for c in checks),
        "max_score": sum(c["max_points"] for c in checks),
        "sandbox": "; ".join(sorted({g.sandbox for g in grades if g.sandbox})) or "no notebook was graded",
        "notebooks": [
            {
                "notebook": g.notebook,
                "exercise": g.exercise,
                "score": g.score,
                "max_score": g.max_score,
                "load_problems": g.problems,
                "flags": g.flags,
                "sandbox": g.sandbox,
                "worker_peak_tasks": g.peak_tasks,
            }
            for g in grades
        ],
        "checks": checks,
    }


def exercise_totals(report: dict) -> list[dict]:
    """One row per exercise graded: its notebook, its points as shown (``3/9``, and what the instructor grades
    where this copy lacks checks) and checks passed as shown (``2/5``), for the summary beside the table."""
    rows = []
    for ex in sorted({c["exercise"] for c in report["checks"]}):
        checks = [c for c in report["checks"] if c["exercise"] == ex]
        notebook = next((nb["notebook"] for nb in report["notebooks"] if nb.get("exercise") == ex), "")
        elsewhere = sum(c["points"] for c in instructor_only(ex))
        passed = sum(bool(c["passed"]) for c in checks)
        rows.append(
            {
                "exercise": ex,
                "notebook": Path(notebook).name if notebook else "",
                "points": f"{sum(c['points'] for c in checks):g}/{sum(c['max_points'] for c in checks)}"
                + (f" (+{elsewhere} by your instructor)" if elsewhere else ""),
                "passed": f"{passed}/{len(checks)}",
                "style": "green" if passed == len(checks) else "red" if passed == 0 else "yellow",
            }
        )
    return rows


def print_table(report: dict, console: Console | None = None) -> None:
    """A score table: check, points, pass/fail, measured vs required, message."""
    if console is None:
        console = Console()
        if not console.is_terminal:  # logs and CI: wide enough that ids never wrap
            console = Console(width=160)
    exercises = sorted({c["exercise"] for c in report["checks"]})
    elsewhere = [c for ex in exercises for c in instructor_only(ex)]  # the learner kit's hidden checks
    more = sum(c["points"] for c in elsewhere)
    table = Table(
        title=f"{report['score']:g} / {report['max_score']} points"
        + (f" from the checks in this kit ({more} more from your instructor's grading)" if elsewhere else "")
        + f"  ({report['device_name']}, profile {report['profile']}, torch {report['torch']})"
    )
    for col in ("check", "kind", "points", "result", "measured", "required", "message"):
        table.add_column(col, overflow="fold", no_wrap=col == "check", max_width=80 if col == "message" else None)
    for c in report["checks"]:
        table.add_row(
            c["id"],
            c["kind"],
            f"{c['points']:g}/{c['max_points']}",
            "[green]pass[/]" if c["passed"] else "[red]FAIL[/]",
            format_value(c["measured"], c["kind"], c["required"]),
            format_value(c["required"], c["kind"], c["measured"]),
            # a message quotes learner code: h[real] is not markup
            escape(c["message"] if not c["passed"] else (c["message"] if c["message"] != "ok" else "")),
        )
    for c in elsewhere:
        required = c.get("required", {}).get(report.get("device", ""))
        timed = ""
        if c["kind"] == "speed":
            device = "CUDA GPU" if report.get("device") == "cuda" else "CPU"
            timed = " Timed against the grader's own baseline" + (
                f": on a {device} it requires {required:.2f}x by default (a calibration of your instructor's"
                " machine may set another)."
                if required is not None
                else ", with your device class's threshold."
            )
        what = escape(c["what"]) + timed
        table.add_row(
            c["id"],
            c["kind"],
            f"-/{c['points']}",
            "[dim]graded by your instructor[/]",
            "",
            format_value(required, "speed") if required is not None else "",
            what,
        )
    console.print(table)
    totals = exercise_totals(report)
    if len(totals) > 1:  # where a long table ended, what each exercise scored
        summary = Table(title="by exercise", title_justify="left")
        for col in ("exercise", "notebook", "points", "checks passed"):
            summary.add_column(col)
        for t in totals:
            summary.add_row(t["exercise"], escape(t["notebook"]), t["points"], f"[{t['style']}]{t['passed']}[/]")
        console.print(summary)
    sandbox = report.get("sandbox", "")
    style = "bold red" if sandbox.startswith("NO SANDBOX") else "dim"
    console.print(f"[{style}]{escape(sandbox)}[/]")
    for nb in report["notebooks"]:
        for problem in nb["load_problems"]:
            console.print(f"[yellow]note[/] {escape(Path(nb['notebook']).name)}: {escape(problem)}")
        for flag in nb.get("flags", []):
            style = "red" if flag["kind"] in ("tamper", "protocol") else "yellow"
            where = f"code cell {flag['cell']}, line {flag['line']}: " if flag.get("cell") else ""  # 0: no cell
            console.print(
                f"[{style}]flagged for review[/] {escape(Path(nb['notebook']).name)}: {where}{escape(flag['message'])}"
            )


def _write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and a rename, so a crash never leaves a half-written report."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def write_reports(report: dict, json_path: Path) -> list[Path]:
    """Write ``json_path``, a markdown page beside it and, if there are speed checks, a chart."""
    json_path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(json_path, json.dumps(report, indent=2) + "\n")
    written = [json_path]
    speed = [c for c in report["checks"] if c["kind"] == "speed" and c["measured"] is not None]
    chart = json_path.with_suffix(".speedups.png")
    if speed:
        import matplotlib

        matplotlib.use("Agg")
        from coursekit.plots import speedup_chart

        fig = speedup_chart(
            [c["id"] for c in speed],
            [c["measured"] for c in speed],
            [c["required"] for c in speed],
            f"Speedup vs the grader's baseline ({report['device_name']}, {report['profile']})",
        )
        fig.savefig(chart, dpi=120, bbox_inches="tight")
        written.append(chart)
    md = [
        f"# Grade report: {report['score']:g} / {report['max_score']}",
        "",
        f"Device: {report['device_name']} ({report['device']}), profile `{report['profile']}`, "
        f"torch {report['torch']}, thresholds: {report['thresholds']}, {report['created']}",
        "",
        f"Learner code: {report.get('sandbox', '')}",
        "",
    ]
    totals = exercise_totals(report)
    if len(totals) > 1:  # the summary first, then every check
        md += ["| exercise | notebook | points | checks passed |", "|---|---|---|---|"]
        for t in totals:
            name = t["notebook"].replace("|", "\\|").replace("\n", " ")
            md.append(f"| {t['exercise']} | {name} | {t['points']} | {t['passed']} |")
        md.append("")
    md += [
        "| check | kind | points | result | measured | required | message |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in report["checks"]:
        msg = c["message"].replace("|", "\\|").replace("\n", " ")
        md.append(
            f"| `{c['id']}` | {c['kind']} | {c['points']:g}/{c['max_points']} | "
            f"{'pass' if c['passed'] else '**FAIL**'} | {format_value(c['measured'], c['kind'], c['required'])} | "
            f"{format_value(c['required'], c['kind'], c['measured'])} | {msg} |"
        )
    if speed:
        md += ["", f"![speedups]({chart.name})"]
    md_path = json_path.with_suffix(".md")
    _write_atomic(md_path, "\n".join(md) + "\n")
    return [*written, md_path]
