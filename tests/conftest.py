"""Shared fixtures: the suite always runs the CPU smoke profile, whatever the machine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from coursekit.cache import use_repo_compile_cache
from coursekit.profile import use_smoke_profile_for_tests

use_smoke_profile_for_tests()
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


def _notebook_minutes(nodeid: str) -> float | None:
    """What executing the notebook in ``nodeid`` costs, from its lesson's manifest (``test_minutes``)."""
    from coursekit.lessons import lessons

    found = re.search(r"\[(notebooks|solutions)/(\d+)_", nodeid)
    if not found:
        return None
    number = int(found.group(2))
    share = {"notebooks": 0.7, "solutions": 0.3}[found.group(1)]  # the lesson notebook measures more
    return next((lesson.test_minutes * share for lesson in lessons() if lesson.number == number), 0.0)


def _expected_cost(item: pytest.Item) -> tuple[int, float]:
    """The reference solutions are graded first (grading one keeps the kernels its worker compiled, which every
    later grading starts from), then notebooks, the costliest first (each lesson's manifest
    says what its tests cost), then other slow tests, then the rest."""
    if "test_solution_passes_every_correctness_and_structure_check" in item.nodeid:
        return -1, 0.0
    minutes = _notebook_minutes(item.nodeid)
    if minutes is not None and "test_executes_top_to_bottom" in item.nodeid:
        return 0, -minutes
    return (1 if item.get_closest_marker("slow") else 2), 0.0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest tests first (a stable sort): pytest-xdist hands tests out in this order, so its processes end
    together instead of one running a lesson notebook while the other waits."""
    items.sort(key=_expected_cost)
