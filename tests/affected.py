"""Which checks a wrong submission can change: the kit's tests grade only those (and the ones it must fail).

A wrong submission is the reference solution with a few edits. The grader's loader runs only definitions
(``grader.loader``), and a check's probes read only the names in its ``needs`` (``grader.probing.Call.get``
refuses any other). Learner code reaches other definitions through the names it uses. So a check whose
``needs``, followed through the names each definition uses, reach no edited definition sees exactly the
reference's code, and its result is the reference's (``test_solution_passes_every_correctness_...``).

Conservative where side effects could hide: an edited import, decorated definition or UPPER_CASE constant
(a registration such as ``@calibrate.register_fake`` changes another name's behaviour) counts as reaching
every check.
"""

from __future__ import annotations

import ast
from pathlib import Path

from IPython.core.inputtransformer2 import TransformerManager

from grader.loader import is_definition, read_cells

EVERYTHING = "*"  # an edit whose effects cannot be traced by name


def _defined(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return [t.id for t in targets if isinstance(t, ast.Name)]


def _traceable(node: ast.stmt) -> bool:
    """A plain def or class: changing it changes only what uses its name."""
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.decorator_list


def definitions(cells: list[str]) -> dict[str, tuple[str, set[str], bool]]:
    """``{name: (source of its definitions, names they use, traceable)}`` for what the loader would run."""
    transformer = TransformerManager()
    found: dict[str, tuple[str, set[str], bool]] = {}
    for raw in cells:
        try:
            tree = ast.parse(transformer.transform_cell(raw))
        except SyntaxError:
            continue
        for node in tree.body:
            if not is_definition(node):
                continue
            used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            for name in _defined(node):
                source, uses, traceable = found.get(name, ("", set(), True))
                found[name] = (source + ast.unparse(node), uses | used, traceable and _traceable(node))
    return found


def code_cells(path: Path) -> list[str]:
    """The code cells' text, read as the grader reads a submission."""
    return read_cells(path)


def edited(before: list[str], after: list[str]) -> set[str]:
    """Names whose definitions differ; ``EVERYTHING`` among them when one cannot be traced by name."""
    old, new = definitions(before), definitions(after)
    changed = {n for n in old.keys() | new.keys() if old.get(n, ("",))[0] != new.get(n, ("",))[0]}
    if any(not (old.get(n) or new[n])[2] or not (new.get(n) or old[n])[2] for n in changed):
        changed.add(EVERYTHING)
    return changed


def reach(needs: tuple[str, ...], *cells: list[str]) -> set[str]:
    """Every name ``needs`` lead to through the names definitions use, in any of ``cells``."""
    uses: dict[str, set[str]] = {}
    for version in cells:
        for name, (_, used, _) in definitions(version).items():
            uses.setdefault(name, set()).update(used)
    seen, todo = set(), list(needs)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(uses.get(name, ()))
    return seen


def can_change(needs: tuple[str, ...], before: list[str], after: list[str]) -> bool:
    """Whether the edit from ``before`` to ``after`` can change the result of a check with these ``needs``."""
    changed = edited(before, after)
    return EVERYTHING in changed or bool(changed & reach(needs, before, after))
