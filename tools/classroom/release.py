"""``release``: nbgrader's release folder for every exercise, and the learner kit zip."""

from __future__ import annotations

import json
import shutil
import sys
import zipfile
from pathlib import Path

from tools.classroom.course import db_url, ensure_course
from tools.classroom.kit_contents import KIT, kit_files, kit_requirements
from tools.classroom.kit_scan import forbidden_definitions, verify_kit
from tools.classroom.kit_templates import KIT_MAKEFILE, KIT_PYPROJECT, KIT_README, kit_timing_line
from tools.make_exercises import KIT_HEADER, SOLUTIONS, generate_assignment


def build_kit(course: Path, released: list[Path], caches: list[Path]) -> tuple[Path, Path, list[str]]:
    """Stage the learner kit under ``course/learner-kit/`` and zip it; returns (folder, zip, warnings)."""
    from grader.exercises import exercise_ids
    from grader.registry import INSTRUCTOR_INDEX, instructor_index

    files, warnings = kit_files()
    stage = course / "learner-kit" / KIT
    if stage.parent.exists():
        shutil.rmtree(stage.parent)
    stage.mkdir(parents=True)
    for rel, src in files.items():
        (stage / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, stage / rel)
    (stage / "exercises").mkdir()
    for notebook in released:
        shutil.copy2(notebook, stage / "exercises" / notebook.name)
    for cache in caches:
        (stage / "cache").mkdir(exist_ok=True)
        shutil.copy2(cache, stage / "cache" / cache.name)
    for exercise in exercise_ids():  # what the kit's hidden checks verify, so its tables can list them
        index = instructor_index(exercise)
        if index["checks"]:
            folder = stage / "grader" / "exercises" / exercise
            folder.mkdir(parents=True, exist_ok=True)
            (folder / INSTRUCTOR_INDEX).write_text(json.dumps(index, indent=1) + "\n")
    (stage / "requirements.txt").write_text(kit_requirements())
    (stage / "README.md").write_text(KIT_README.replace("{timed}", kit_timing_line()))
    (stage / "Makefile").write_text(KIT_MAKEFILE)
    (stage / "pyproject.toml").write_text(KIT_PYPROJECT)
    problems = verify_kit(stage)
    warnings += forbidden_definitions(stage)[1]
    if problems:
        raise SystemExit("the learner kit would leak or break; nothing was zipped:\n  " + "\n  ".join(problems))
    archive = course / f"{KIT}.zip"
    tmp = archive.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(stage.rglob("*")):
            if path.is_file():
                zf.write(path, Path(KIT) / path.relative_to(stage))
    tmp.replace(archive)
    return stage, archive, warnings


def release(course: Path, caches: list[Path]) -> Path:
    """nbgrader's release folder for every exercise, and the learner kit zip."""
    ensure_course(course)
    url = db_url(course)
    released = []
    for solution in sorted(SOLUTIONS.glob("[0-9][0-9]_*.ipynb")):
        released.append(generate_assignment(course, solution, url, KIT_HEADER))
        print(f"released {released[-1].relative_to(course)}")
    stage, archive, warnings = build_kit(course, released, caches)
    notes = [w.removeprefix("note: ") for w in warnings if w.startswith("note: ")]
    for warning in (w for w in warnings if not w.startswith("note: ")):
        print(f"warning: {warning}", file=sys.stderr)
    if notes:  # lessons that define an exercise's name on purpose: nothing to do
        print(f"the kit scan: {len(notes)} expected definition(s) of exercise names in given code (nothing to do):")
        print("\n".join(f"  {note}" for note in notes))
    size = archive.stat().st_size / 1024**2
    print(f"wrote {archive} ({size:.1f} MiB; unpacked in {stage}); checked: no solution code, no hidden checks")
    return archive
