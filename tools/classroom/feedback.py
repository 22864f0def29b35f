"""``feedback``: nbgrader's page of each graded notebook, and the grader's per-check pages."""

from __future__ import annotations

import html
import sys
from pathlib import Path

from tools.classroom.course import assignments, nbgrader
from tools.classroom.learners import autograded_notebook, id_problem, refused_note, refused_submissions
from tools.classroom.records import check_records, graded_scores

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:80em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:.3em .6em;vertical-align:top;text-align:left}}.pass{{color:#070}}
.fail{{color:#b00;font-weight:bold}}.notes{{background:#fff6d6;padding:.5em 1em}}</style></head>
<body>{body}</body></html>
"""


def feedback_page(
    student: str,
    assignment: str,
    records: dict[str, dict],
    scores: dict[str, float],
    notes: list[str],
    notebook_html: str | None,
) -> str:
    """One learner's results for one exercise: each check, measured vs required, and what to fix."""
    from grader.numbers import format_value

    total = sum(scores.values())
    possible = sum(float(r.get("max_points", 0)) for r in records.values())
    parts = [
        f"<h1>{html.escape(assignment)}: {total:g} / {possible:g} points</h1>"
        if records
        else f"<h1>{html.escape(assignment)}: not graded</h1>",
        f"<p>Student <b>{html.escape(student)}</b>. Each row is one check; the message says what to fix.</p>"
        if records
        else f"<p>Student <b>{html.escape(student)}</b>. Hand in the exercise's notebook file itself (not a link, "
        "within the size limit) and ask for a regrade.</p>",
    ]
    if notes:
        parts.append(
            '<div class="notes"><b>Notes from the grader</b><ul>'
            + "".join(f"<li>{html.escape(n)}</li>" for n in notes)
            + "</ul></div>"
        )
    rows = []
    for cid, r in records.items():
        kind = r.get("kind", "")
        ok = bool(r.get("passed"))
        points = scores.get(cid, r.get("points", 0))
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{c}</td>"
                for c in (
                    f"<code>{html.escape(cid)}</code><br><small>{html.escape(r.get('title') or '')}</small>",
                    html.escape(kind),
                    f"{points:g} / {float(r.get('max_points', 0)):g}",
                    '<span class="pass">pass</span>' if ok else '<span class="fail">FAIL</span>',
                    format_value(r.get("measured"), kind, r.get("required")),
                    format_value(r.get("required"), kind, r.get("measured")),
                    html.escape(r.get("thresholds") or ""),
                    html.escape(r.get("message") or "").replace("\n", "<br>"),
                )
            )
            + "</tr>"
        )
    if rows:
        parts.append(
            "<table><tr><th>check</th><th>kind</th><th>points</th><th>result</th><th>measured</th>"
            "<th>required</th><th>thresholds</th><th>message</th></tr>" + "".join(rows) + "</table>"
        )
    if notebook_html:
        parts.append(
            f"<p>Your graded notebook, with each check cell's result (the grader runs only your definitions, "
            f'never your demo cells, so their outputs are not kept): <a href="{html.escape(notebook_html)}">'
            f"{html.escape(notebook_html)}</a></p>"
        )
    return PAGE.format(title=html.escape(f"{assignment} feedback for {student}"), body="\n".join(parts))


FEEDBACK_START_SECONDS = 60  # nbgrader's start, and a class's first notebook
FEEDBACK_SECONDS = 10  # each graded notebook's page, with room: one renders in about a second on 2 cores


def notebook_feedback(course: Path, assignment: str) -> list[str]:
    """nbgrader's page of each graded notebook of ``assignment``, within a time budget; the learners it could not
    render in time, each with why. A learner's Markdown can take nbconvert minutes to render (red team, session 32:
    80 KB of ``[a](`` took 20 s, and the cost grows as its square), which stalled the whole class's feedback: past
    the budget, each learner is rendered alone, within ``FEEDBACK_START_SECONDS``."""
    students = sorted(p.parent.name for p in (course / "autograded").glob(f"*/{assignment}"))
    students = [s for s in students if autograded_notebook(course, s, assignment) and not id_problem(s)]
    if not students:
        return []
    budget = FEEDBACK_START_SECONDS + FEEDBACK_SECONDS * len(students)
    try:
        nbgrader(course, "generate_feedback", assignment, "--force", timeout=budget)
        return []
    except SystemExit as exc:
        print(f"{assignment}: {str(exc).splitlines()[0]}; rendering each learner's notebook alone", file=sys.stderr)
    missed = []
    for student in students:
        try:
            nbgrader(
                course,
                "generate_feedback",
                assignment,
                "--force",
                f"--student={student}",
                quiet=True,
                timeout=FEEDBACK_START_SECONDS,
            )
        except SystemExit as exc:
            lines = str(exc).strip().splitlines()
            missed.append(
                f"{assignment}  {student}: {lines[0]}" + (f" ({lines[-1].strip()})" if len(lines) > 1 else "")
            )
    return missed


def feedback(course: Path) -> list[Path]:
    """nbgrader's notebook feedback, plus a per-check page per learner and exercise, plus an index per learner."""
    unrendered = []
    for assignment in assignments(course):
        unrendered += notebook_feedback(course, assignment)
    rows = graded_scores(course)
    refused = refused_submissions(course)
    scores: dict[tuple[str, str], dict[str, float]] = {}
    for row in rows:
        scores.setdefault((row["student"], row["assignment"]), {})[row["check"]] = row["points"]
    written = []
    index: dict[str, list[str]] = {}
    for path in sorted((course / "autograded").glob("*/ex[0-9][0-9]/*.ipynb")):
        student, assignment = path.parent.parent.name, path.parent.name
        records, notes = check_records(path)
        if student in refused.get(assignment, {}):  # handed in again, unreadable: these results are older
            notes = [refused_note(course, assignment, student, refused[assignment][student]), *notes]
        out_dir = course / "feedback" / student / assignment
        out_dir.mkdir(parents=True, exist_ok=True)
        nb_html = path.with_suffix(".html").name if (out_dir / path.with_suffix(".html").name).is_file() else None
        page = out_dir / "checks.html"
        page.write_text(
            feedback_page(student, assignment, records, scores.get((student, assignment), {}), notes, nb_html)
        )
        written.append(page)
        total = sum(scores.get((student, assignment), {}).values())
        possible = sum(float(r.get("max_points", 0)) for r in records.values())
        index.setdefault(student, []).append(
            f'<li><a href="{assignment}/checks.html">{assignment}</a>: {total:g} / {possible:g}</li>'
        )
    for assignment, students in sorted(refused.items()):
        for student, why in sorted(students.items()):
            if autograded_notebook(course, student, assignment):
                continue  # its page above carries the note
            out_dir = course / "feedback" / student / assignment
            out_dir.mkdir(parents=True, exist_ok=True)
            page = out_dir / "checks.html"
            page.write_text(
                feedback_page(student, assignment, {}, {}, [refused_note(course, assignment, student, why)], None)
            )
            written.append(page)
            index.setdefault(student, []).append(
                f'<li><a href="{assignment}/checks.html">{assignment}</a>: not graded</li>'
            )
    for student, items in index.items():
        page = course / "feedback" / student / "index.html"
        page.write_text(
            PAGE.format(
                title=f"Feedback for {html.escape(student)}",
                body=f"<h1>Feedback for {html.escape(student)}</h1><ul>{''.join(items)}</ul>",
            )
        )
        written.append(page)
    print(
        f"feedback for {len(index)} learner(s) under {course / 'feedback'}/<learner>/: index.html, and per exercise "
        "checks.html (the grader's pages) and nbgrader's page of the graded notebook"
    )
    if unrendered:
        print(
            "\n".join(["no page of the graded notebook (their checks.html pages are written):", *unrendered]),
            file=sys.stderr,
        )
    return written
