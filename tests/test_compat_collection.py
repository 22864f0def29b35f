"""Every test module imports, or skips itself, where nbgrader is missing (the compat venv, ``make test-compat``).

``-k`` deselects after collection, and collection imports every module: a module-level import of
``tools.classroom`` (which needs nbgrader) broke the compat run twice, at ababe35 and in session 33."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.submissions import ROOT

IMPORT_ALL_WITHOUT_NBGRADER = """
import importlib, pathlib, sys
import _pytest.outcomes
from coursekit.profile import use_smoke_profile_for_tests

use_smoke_profile_for_tests()


class NoNbgrader:
    def find_spec(self, name, path=None, target=None):
        if name == "nbgrader" or name.startswith("nbgrader."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, NoNbgrader())
files = sorted(pathlib.Path("tests").glob("test_*.py")) + sorted(pathlib.Path("coursekit/lessons").glob("*/test_*.py"))
broken = []
for path in files:
    try:
        importlib.import_module(".".join(path.with_suffix("").parts))
    except _pytest.outcomes.Skipped:
        pass
    except ImportError as exc:
        broken.append(f"{path}: {exc}")
print("IMPORTED", len(files))
print("\\n".join(broken))
"""


def test_every_test_module_imports_or_skips_itself_without_nbgrader() -> None:
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL_WITHOUT_NBGRADER], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0 and "IMPORTED" in done.stdout, done.stderr[-3000:]
    imported, *broken = done.stdout.strip().splitlines()
    assert int(imported.split()[1]) > 40, imported
    assert not broken, "import tools.classroom inside a test, or pytest.importorskip('nbgrader') first:\n" + "\n".join(
        broken
    )
