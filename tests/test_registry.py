"""One registry: nbgrader cells, points, visibility and thresholds all agree with it."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from grader.context import load_thresholds
from grader.interface import INTERFACE
from grader.registry import load_all
from tests.submissions import EXERCISES


def _test_cells(path):
    nb = nbformat.read(path, as_version=4)
    return [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]


@pytest.mark.parametrize("exercise", list(EXERCISES))
def test_every_check_has_one_autograde_cell_with_its_points_and_visibility(exercise: str) -> None:
    checks = {cid: c for cid, c in load_all().items() if c.exercise == exercise}
    cells = _test_cells(EXERCISES[exercise][0])
    seen = {}
    for cell in cells:
        meta = cell.metadata["nbgrader"]
        cid = meta["grade_id"].replace("-", ".")
        assert cid in checks, f"autograde cell {meta['grade_id']} runs no registered check"
        assert f'run_check("{cid}", globals())' in cell.source
        assert meta["points"] == checks[cid].points, (
            f"{cid}: cell says {meta['points']} points, registry {checks[cid].points}"
        )
        points = checks[cid].points
        said = f"`{cid}` ({points:g} point{'' if points == 1 else 's'})"
        assert said in cell.source, f"{cid}: its cell's comment should say {said}"
        hidden = "### BEGIN HIDDEN TESTS" in cell.source
        assert hidden != checks[cid].public, f"{cid}: public={checks[cid].public} but hidden markers={hidden}"
        seen[cid] = cell
    assert set(seen) == set(checks), f"checks without an autograde cell: {set(checks) - set(seen)}"


def test_checks_are_well_formed() -> None:
    for cid, c in load_all().items():
        assert cid.startswith(c.exercise + ".") and c.points > 0
        assert c.fn.__doc__, f"{cid} needs a docstring: its first line is the report's title"
        assert set(c.needs) <= set(INTERFACE[c.exercise]), f"{cid} needs names outside grader/interface.py"


def test_every_speed_check_has_a_threshold_for_each_device_class() -> None:
    thresholds = load_thresholds()
    for cid, c in load_all().items():
        if c.kind == "speed":
            for device_class in ("cpu", "cuda"):
                entry = thresholds[device_class][cid]
                assert entry["required"] > 1.0
                if entry["reference"]:
                    assert entry["required"] - 1 <= 0.5 * (entry["reference"] - 1), (
                        f"{cid} on {device_class}: threshold {entry['required']} asks for more than half the "
                        f"gain the reference solution measured ({entry['reference']})"
                    )


def test_the_learner_kit_lists_the_checks_it_does_not_hold(tmp_path, monkeypatch) -> None:
    """`make release` writes each exercise's hidden checks as a list; the kit's tables show them as graded by the
    instructor and count their points apart (here: one check this copy holds, one it does not)."""
    import io
    import json

    from rich.console import Console

    from grader import registry
    from grader.report import print_table

    index = registry.instructor_index("ex02")
    assert index["checks"] and all(c["what"] and not c["what"].startswith('"') for c in index["checks"])
    for ex in {c.exercise for c in registry.load_all().values()}:  # a docstring's wrapped first sentence, whole
        for c in registry.instructor_index(ex)["checks"]:
            assert c["what"].endswith((".", ")", "`")) and "\n" not in c["what"], f"{c['id']}: {c['what']!r}"
    speed = [c for c in index["checks"] if c["kind"] == "speed"]  # the default gains ship, for both device classes
    assert speed and all(set(c["required"]) == {"cpu", "cuda"} and min(c["required"].values()) > 1 for c in speed)
    assert all("required" not in c for c in index["checks"] if c["kind"] != "speed")
    index["checks"].append(
        {"id": "ex02.kit.only", "kind": "speed", "points": 3, "what": "logits [N, C] only", "required": {"cpu": 1.5}}
    )
    (tmp_path / "ex02").mkdir()
    (tmp_path / "ex02" / registry.INSTRUCTOR_INDEX).write_text(json.dumps(index))
    monkeypatch.setattr(registry, "EXERCISES_DIR", tmp_path)
    assert [c["id"] for c in registry.instructor_only("ex02")] == ["ex02.kit.only"]  # held checks are not listed
    report = {
        "score": 2, "max_score": 2, "device": "cpu", "device_name": "cpu", "profile": "smoke", "torch": "x",
        "notebooks": [],
        "checks": [{"id": "ex02.calibrate.opcheck", "exercise": "ex02", "kind": "structure", "points": 2,
                    "max_points": 2, "passed": True, "measured": None, "required": None, "message": "ok"}],
    }  # fmt: skip
    out = io.StringIO()
    print_table(report, Console(file=out, width=200))
    text = out.getvalue()
    assert "(3 more from your instructor's grading)" in text and "graded by your instructor" in text
    assert "logits [N, C] only" in text and "Timed against the grader's own baseline" in text
    row = next(line for line in text.splitlines() if "ex02.kit.only" in line)
    assert "1.50x" in row and "1.50x by default" in text  # the required column, and the message says it


def test_a_grader_without_thresholds_says_it_has_no_timed_checks(monkeypatch, tmp_path) -> None:
    """The learner kit ships no thresholds.toml: its reports say so instead of naming files it does not have."""
    from grader import context
    from grader.context import Context

    ctx = Context.create(secret=1)
    assert "thresholds.toml" in ctx.describe_thresholds()
    monkeypatch.setattr(context, "THRESHOLDS_FILE", tmp_path / "thresholds.toml")
    assert ctx.describe_thresholds() == "none (this copy of the grader has no timed checks)"


def test_a_notebook_named_for_no_exercise_is_told_how_to_name_it() -> None:
    """``python -m grader`` and ``grader check`` both say that the name must start with the exercise's number."""
    from grader import workshop
    from grader.__main__ import find_notebooks

    for call in (lambda: workshop.resolve("mine_04.ipynb", Path(".")), lambda: find_notebooks(Path("mine_04.ipynb"))):
        with pytest.raises(SystemExit, match="must start with its exercise's number and an underscore, like 02_my"):
            call()
    assert workshop.resolve("04_mine.ipynb", Path("."))[0] == "ex04"


def test_the_table_shows_learner_code_as_written_and_a_near_miss_apart_from_its_threshold() -> None:
    """A message quoting ``h[real]`` is not Rich markup, and a speed of 1.2466x against 1.25x does not print as
    1.25x against 1.25x, in the table and in the checks' own messages (``grader.numbers.distinct``)."""
    import io

    from rich.console import Console

    from grader.numbers import distinct
    from grader.report import print_table

    assert distinct(1.2466, 1.25) == ("1.247x", "1.250x") and distinct(1.24996, 1.25) == ("1.2500x", "1.2500x")
    assert distinct(1.64, 1.25) == ("1.64x", "1.25x") and distinct(1.25, 1.25) == ("1.25x", "1.25x")
    message = "<code cell 6>:15: h = h - h[real].mean(0) [bold]x[/]"  # wraps at 80 columns otherwise
    report = {
        "score": 0, "max_score": 4, "device": "cpu", "device_name": "cpu", "profile": "smoke", "torch": "x",
        "notebooks": [{"notebook": "02_[a].ipynb", "load_problems": ["cell [3] failed"], "flags": []}],
        "checks": [
            {"id": "ex02.scorer.no_breaks", "exercise": "ex02", "kind": "structure", "points": 0, "max_points": 2,
             "passed": False, "measured": 1, "required": 0, "message": message},
            {"id": "ex02.scorer.speed", "exercise": "ex02", "kind": "speed", "points": 0, "max_points": 2,
             "passed": False, "measured": 1.2466, "required": 1.25, "message": "too slow"},
        ],
    }  # fmt: skip
    out = io.StringIO()
    print_table(report, Console(file=out, width=400))
    text = out.getvalue()
    assert "h = h - h[real].mean(0) [bold]x[/]" in text, text
    assert "02_[a].ipynb: cell [3] failed" in text
    row = next(line for line in text.splitlines() if "ex02.scorer.speed" in line)
    assert "1.247x" in row and "1.250x" in row, row


def test_a_report_of_several_exercises_sums_each_one(tmp_path) -> None:
    """Under a long table of checks, the terminal shows what each exercise scored; the markdown page shows it first."""
    import io

    from rich.console import Console

    from grader.report import print_table, write_reports

    def check(cid: str, passed: bool, points: int) -> dict:
        ex = cid.split(".")[0]
        return {"id": cid, "exercise": ex, "kind": "correctness", "points": points if passed else 0,
                "max_points": points, "passed": passed, "measured": None, "required": None, "message": "m"}  # fmt: skip

    report = {
        "score": 3, "max_score": 6, "device": "cpu", "device_name": "cpu", "profile": "smoke", "torch": "x",
        "thresholds": "t", "created": "now", "sandbox": "s",
        "notebooks": [{"notebook": "/x/00_orientation.ipynb", "exercise": "ex00", "load_problems": [], "flags": []},
                      {"notebook": "/x/02_a|b.ipynb", "exercise": "ex02", "load_problems": [], "flags": []}],
        "checks": [check("ex00.capture.graph", True, 2), check("ex00.capture.branches", True, 1),
                   check("ex02.scorer.outputs", False, 2), check("ex02.calibrate.opcheck", False, 1)],
    }  # fmt: skip
    out = io.StringIO()
    print_table(report, Console(file=out, width=200))
    lines = out.getvalue().splitlines()
    summary = lines[next(i for i, line in enumerate(lines) if "by exercise" in line) :]
    assert any(
        "ex00" in line and "00_orientation.ipynb" in line and "3/3" in line and "2/2" in line for line in summary
    )
    assert any("ex02" in line and "0/3" in line and "0/2" in line for line in summary)
    md = next(p for p in write_reports(report, tmp_path / "r.json") if p.suffix == ".md").read_text().splitlines()
    first = md.index("| exercise | notebook | points | checks passed |")
    assert first < md.index("| check | kind | points | result | measured | required | message |")
    assert "| ex02 | 02_a\\|b.ipynb | 0/3 | 0/2 |" in md and "| ex00 | 00_orientation.ipynb | 3/3 | 2/2 |" in md
    one = {**report, "checks": report["checks"][:2]}  # one exercise: its table is the summary
    out = io.StringIO()
    print_table(one, Console(file=out, width=200))
    assert "by exercise" not in out.getvalue()


def test_a_checks_title_is_its_whole_first_sentence_not_a_wrapped_line() -> None:
    """Blind learner, session 38: titles were the docstring's first line, which stopped mid-sentence ("... of
    guarded properties (a tensor's") in run_check's FAIL line, lesson 0's table and feedback."""
    from grader.registry import Check, load_all

    def wrapped(learner, ctx) -> None:
        """Counts one compile per new combination of guarded properties (a tensor's
        shape, dtype), after each call.

        Details that stay out of the title."""

    check = Check("ex99.title.wrapped", "ex99", "structure", 1, True, (), wrapped)
    assert (
        check.title
        == "Counts one compile per new combination of guarded properties (a tensor's shape, dtype), after each call."
    )
    cut = [(c.id, c.title) for c in load_all().values() if c.title.count("(") != c.title.count(")") or "\n" in c.title]
    assert not cut, f"titles cut mid-sentence: {cut}"
