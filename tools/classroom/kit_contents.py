"""What the learner kit ships: an allow-list of the kit's files, never a list of what to leave out."""

from __future__ import annotations

from pathlib import Path

from tools.classroom.course import ROOT

KIT = "tcip-learner-kit"
KIT_DISK_CHECK = "tools/disk_room.py"  # standard library only; no tools/__init__.py ships (a namespace package)


# Grader modules a learner needs to run the public checks in a notebook, `python -m grader` and
# `python -m grader check` (workshop mode). Each exercise's public parts are added by discovery.
PUBLIC_GRADER = (
    "__init__.py",
    "__main__.py",
    "cgroups.py",
    "conftest.py",
    "containment.py",
    "context.py",
    "interface.py",
    "judging.py",
    "learner.py",
    "learner_failures.py",
    "loader.py",
    "local_learner.py",
    "machine_lock.py",
    "notebook.py",
    "numbers.py",
    "numerics.py",
    "pinned.py",
    "preload.py",
    "probing.py",
    "protocol.py",
    "quiet.py",
    "registry.py",
    "report.py",
    "results.py",
    "runner.py",
    "sandbox.py",
    "scan.py",
    "stance.py",
    "stuck.py",
    "test_submission.py",
    "worker.py",
    "worker_limits.py",
    "worker_start.py",
    "workshop.py",
    "exercises/__init__.py",
)
# instructor-only grader modules that shipped code may import inside a function (a path learners never take)
INSTRUCTOR_MODULES = ("batch", "calibrate", "restore", "nbgrader_hooks", "speed")
PUBLIC_EXERCISE_PARTS = ("__init__.py", "contract.py", "probes.py", "public.py", "fixtures.safetensors")
INSTRUCTOR_ONLY = ("hidden.py", "reference.py", "submissions.py", "thresholds.toml")


def _kit_test(path: Path) -> bool:
    """The lessons' own tests (``test_lesson.py``, ``conftest.py``) stay with the instructor: some import
    hidden checks, and a learner's pytest should not collect them."""
    return path.name.startswith("test_") or path.name == "conftest.py"


def kit_files() -> tuple[dict[str, Path], list[str]]:
    """``{path in the kit: source file}`` for everything that ships, and warnings for the instructor."""
    from grader.exercises import exercise_ids

    files: dict[str, Path] = {}
    warnings: list[str] = []
    for path in sorted((ROOT / "coursekit").rglob("*")):
        if path.suffix in (".py", ".toml") and "__pycache__" not in path.parts and not _kit_test(path):
            files[path.relative_to(ROOT).as_posix()] = path
    grader = ROOT / "grader"
    for name in PUBLIC_GRADER:
        if (grader / name).is_file():
            files[f"grader/{name}"] = grader / name
    for exercise in exercise_ids():
        folder = grader / "exercises" / exercise
        for name in PUBLIC_EXERCISE_PARTS:
            if (folder / name).is_file():
                files[f"grader/exercises/{exercise}/{name}"] = folder / name
        if not (folder / "public.py").is_file():
            warnings.append(
                f"{exercise}: no public.py, so none of its checks ship and its public check cells will "
                "say so in the kit"
            )
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        files[f"notebooks/{path.name}"] = path
    files[KIT_DISK_CHECK] = ROOT / KIT_DISK_CHECK  # the kit's `make setup` runs it before the venv exists
    return files, warnings


def kit_requirements() -> str:
    """requirements.txt without the instructor-only lines (marked ``# instructor``) and the line on
    ``environment.yml``, which the kit does not ship (a blind attendee, session 45)."""
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    kept = [line for line in lines if "# instructor" not in line and "environment.yml" not in line]
    return "\n".join(kept) + "\n"
