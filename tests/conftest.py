"""Shared fixtures: the suite always runs the CPU smoke profile, whatever the machine."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

os.environ.setdefault("COURSEKIT_PROFILE", "smoke")
os.environ.setdefault("COURSEKIT_DEVICE", "cpu")
sys.path.insert(0, str(Path(__file__).parent))  # for tests/submissions.py

from coursekit.cache import use_repo_compile_cache  # noqa: E402

use_repo_compile_cache()


@pytest.fixture(scope="session")
def profile():
    from coursekit.profile import get_profile

    return get_profile()


@pytest.fixture(scope="session")
def grade(profile):
    """``grade(path, check_ids=None) -> {check_id: CheckResult}`` in isolated workers."""
    from grader.interface import exercise_for
    from grader.runner import grade_notebook

    def run(path: Path, check_ids: list[str] | None = None, seed: int = 20261121):
        result = grade_notebook(path, exercise_for(path), profile, seed, check_ids=check_ids, progress=False)
        return {r.id: r for r in result.results}

    return run


def _expected_cost(item: pytest.Item) -> tuple[int, int]:
    """The reference solutions are graded first (grading one keeps the kernels its worker compiled, which every
    later grading of that exercise starts from), then lessons run top to bottom (later lessons measure more: the
    last one first), then other slow tests, then the rest."""
    if "test_solution_passes_every_correctness_and_structure_check" in item.nodeid:
        return -1, 0
    lesson = re.search(r"\[notebooks/(\d+)_", item.nodeid)
    if lesson and "test_executes_top_to_bottom" in item.nodeid:
        return 0, -int(lesson.group(1))
    return (1 if item.get_closest_marker("slow") else 2), 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest tests first (a stable sort): pytest-xdist hands tests out in this order, so its processes end
    together instead of one running a lesson notebook while the other waits."""
    items.sort(key=_expected_cost)
