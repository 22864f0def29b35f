"""One pytest test per registered check; each notebook is graded once per session, on the checks selected
(``-k`` and ``-m`` narrow what is graded, not only what is reported)."""

from __future__ import annotations

import pytest

from coursekit.profile import get_profile
from grader.__main__ import find_notebooks
from grader.context import Context
from grader.registry import checks_for
from grader.runner import grade_notebook


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "check_id" in metafunc.fixturenames:
        pairs = find_notebooks(metafunc.config.getoption("--submission"))
        ids = [(ex, nb, c.id) for ex, nb in pairs for c in checks_for(ex)]
        metafunc.parametrize("exercise, notebook, check_id", ids, ids=[i[2] for i in ids])


@pytest.fixture(scope="session")
def graded() -> dict:
    return {}


def _selected(session: pytest.Session, notebook) -> list[str]:
    """The check ids this session runs for ``notebook``, in collection order."""
    return [
        item.callspec.params["check_id"]
        for item in session.items
        if hasattr(item, "callspec") and item.callspec.params.get("notebook") == notebook
    ]


def test_check(exercise, notebook, check_id, graded, request: pytest.FixtureRequest) -> None:
    if notebook not in graded:
        if not notebook.is_file():
            pytest.fail(f"notebook not found: {notebook}")
        profile = get_profile()
        graded[notebook] = {
            r.id: r
            for r in grade_notebook(
                notebook,
                exercise,
                profile,
                Context.create(profile).secret,
                check_ids=_selected(request.session, notebook),
                progress=False,
            ).results
        }
    result = graded[notebook][check_id]
    assert result.passed, result.message
