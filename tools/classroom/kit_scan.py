"""The learner kit's scan before it is zipped: no solution code, no hidden check, no reference, no broken import."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

import nbformat

from tools.classroom.course import ROOT
from tools.classroom.kit_contents import INSTRUCTOR_MODULES, INSTRUCTOR_ONLY, kit_files
from tools.make_exercises import SOLUTIONS

MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "BEGIN MARK SCHEME")


def _imports(path: Path, module_level: bool = False) -> set[str]:
    """The modules ``path`` imports; ``module_level``: only those imported when it is imported (not inside a
    function, where an import runs only when the function is called)."""
    names = set()
    tree = ast.parse(path.read_text())
    nodes = ast.walk(tree)
    if module_level:
        lazy = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for inner in ast.walk(node)
        }
        nodes = (node for node in ast.walk(tree) if id(node) not in lazy)
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def _closed_imports(stage: Path) -> list[str]:
    """Shipped grader/coursekit modules importing a grader/coursekit module that does not ship."""
    missing = []
    for path in sorted(stage.rglob("*.py")):
        eager = _imports(path, module_level=True)
        for module in _imports(path):
            if module.split(".")[0] in ("grader", "coursekit") and module not in ("grader", "coursekit"):
                rel = module.replace(".", "/")
                if not ((stage / f"{rel}.py").is_file() or (stage / rel / "__init__.py").is_file()):
                    if module in eager or module.removeprefix("grader.") not in INSTRUCTOR_MODULES:
                        missing.append(f"{path.relative_to(stage)} imports {module}, which does not ship")
    return missing


def text_files(stage: Path) -> dict[Path, str]:
    """Every UTF-8 text file under ``stage``, read."""
    out = {}
    for path in stage.rglob("*"):
        if path.is_file():
            try:
                out[path] = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
    return out


def _contains(text: str, line: str) -> bool:
    """``line`` occurs in ``text`` as it is, or as a notebook's JSON stores it."""
    return line in text or json.dumps(line)[1:-1] in text


def public_baseline() -> str:
    """The text of everything that is public by design: the files the allow-list ships, and exercises/."""
    files, _ = kit_files()
    sources = [*files.values(), *(ROOT / "exercises").glob("[0-9][0-9]_*.ipynb")]
    return "\n".join(p.read_text() for p in sources if p.suffix in (".py", ".ipynb"))


def solution_lines(baseline: str) -> set[str]:
    """Lines of code inside the solutions' ``### BEGIN SOLUTION`` regions that occur nowhere in the public
    material (``baseline``): if one of them ships, a solution leaked."""
    found = set()
    for path in SOLUTIONS.glob("[0-9][0-9]_*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            inside = False
            for line in cell.source.splitlines():
                text = line.strip()
                if "BEGIN SOLUTION" in text or "END SOLUTION" in text:
                    inside = "BEGIN" in text
                elif inside and len(text) >= 12 and not _contains(baseline, text):
                    found.add(text)
    return found


def hidden_check_lines(baseline: str) -> dict[str, set[str]]:
    """For each hidden check: its ``def`` line and the lines of its code that occur in no public material."""
    from grader.registry import load_all

    out = {}
    for cid, check in load_all().items():
        if check.public:
            continue
        lines = {line.strip() for line in inspect.getsource(check.fn).splitlines()}
        what = (check.fn.__doc__ or "").strip().split("\n")[0].strip()  # id and this ship by design (instructor_checks)
        out[cid] = {f"def {check.fn.__name__}("} | {
            s for s in lines if len(s) >= 16 and not _contains(baseline, s) and s.strip('",') not in (what, cid)
        }
    return out


def verify_kit(stage: Path) -> list[str]:
    """Every way the kit could leak a solution or a hidden check, and any import it cannot satisfy."""
    problems = []
    texts = text_files(stage)
    for path, text in texts.items():
        rel = path.relative_to(stage)
        for marker in MARKERS:
            if marker in text:
                problems.append(f"{rel}: contains `### {marker}`")
    for path in (stage / "grader" / "exercises").rglob("*"):
        if path.name in INSTRUCTOR_ONLY:
            problems.append(f"{path.relative_to(stage)} ships, but hidden checks and references are instructor-only")
    for name in ("thresholds.toml", "batch.py", "calibrate.py", "restore.py", "nbgrader_hooks.py"):
        if (stage / "grader" / name).exists():
            problems.append(f"grader/{name} ships, but it is instructor-only")
    if (stage / "grader" / "calibration").exists() or (stage / "solutions").exists():
        problems.append("calibration files or solutions/ ship")
    baseline = public_baseline()
    leaks = solution_lines(baseline)
    hidden = hidden_check_lines(baseline)
    for path, text in texts.items():
        rel = path.relative_to(stage)
        problems += [f"{rel}: contains solution code `{s}`" for s in sorted(leaks) if _contains(text, s)]
        for cid, lines in hidden.items():
            problems += [
                f"{rel}: contains code of hidden check {cid}: `{s}`" for s in sorted(lines) if _contains(text, s)
            ]
    return problems + forbidden_definitions(stage)[0] + _closed_imports(stage)


def _defined_names(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def reference_names() -> set[str]:
    """Every function and class the exercises' ``reference.py`` modules define."""
    names: set[str] = set()
    for path in (ROOT / "grader" / "exercises").glob("ex[0-9][0-9]/reference.py"):
        names |= {n.name for n in ast.parse(path.read_text()).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return names


def forbidden_definitions(stage: Path) -> tuple[list[str], list[str]]:
    """(problems, warnings): a shipped module that defines an exercise's interface name or a reference function
    stops the release, unless the name is one a contract lists in ``SHOWN_IN_LESSONS`` (then a warning with its
    stated reason). Lesson notebooks are teaching material: what their cells define is reported as warnings (that
    a lesson cell must not solve an exercise is tested by pasting, not by names)."""
    from IPython.core.inputtransformer2 import TransformerManager

    from grader.interface import INTERFACE, SHOWN_IN_LESSONS

    interface = {name: ex for ex, names in INTERFACE.items() for name in names}
    allowed = {name: reason for reasons in SHOWN_IN_LESSONS.values() for name, reason in reasons.items()}
    references = reference_names()
    sources: list[tuple[str, str]] = []
    for path in sorted(stage.rglob("*.py")):
        sources.append((str(path.relative_to(stage)), path.read_text()))
    transformer = TransformerManager()
    for path in sorted((stage / "notebooks").glob("*.ipynb")):
        for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type == "code":
                sources.append((f"{path.relative_to(stage)} cell {i}", transformer.transform_cell(cell.source)))
    problems, warnings = [], []
    for where, text in sources:
        found = problems if where.endswith(".py") else warnings
        for name in sorted(_defined_names(text)):
            if name in references:
                found.append(f"{where} defines {name}, a reference function of the grader")
            elif name in interface and name in allowed:
                warnings.append(
                    f"note: {where} defines {name} ({interface[name]}'s interface), as meant: {allowed[name]}"
                )
            elif name in interface:
                found.append(f"{where} defines {name}, a name {interface[name]}'s learners must write")
    return problems, warnings
