"""One registry: nbgrader cells, points, visibility and thresholds all agree with it."""

from __future__ import annotations

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
