"""Lesson cells pasted into an exercise's answer cells: which pastes could pass a check, and the notebooks to grade.

A learner who copies a lesson cell into an answer cell either keeps the lesson's names or renames one definition to
the name the exercise asks for. So a *paste* is one lesson code cell plus, at most, a two-line definition that makes
an interface name call (or subclass) something that cell defines or imports from the course kit. The cell is pasted
as it is, after the lesson's own imports (so that a missing import never hides a working paste), into the answer
cell that defines that name in the reference solution, in place of that definition; everything else keeps the
reference solution, which is the most a paste could lean on.

Only pastes that can be called the way the checks call the name are kept: the same kind (a class for a class, a
function for a function) and a signature that takes the stub's positional arguments. That leaves a handful per
exercise, which ``tests/test_paste.py`` grades.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nbformat
from IPython.core.inputtransformer2 import TransformerManager

from coursekit.lessons import lesson
from grader.interface import INTERFACE, NOTEBOOKS
from tests.submissions import ROOT

SOLUTION_MARK = "### BEGIN SOLUTION"
KIT_MODULES = ("coursekit", "grader")  # imports a lesson cell can hand a learner ready-made


@dataclass(frozen=True)
class Paste:
    """One lesson cell pasted in place of the reference answer that defines ``name``."""

    exercise: str
    name: str
    lesson: str  # the lesson notebook, relative to the repository
    cell: int
    source: str  # what goes into the answer cell
    binds: str  # the lesson's name that ``name`` is bound to ("" when the cell defines ``name`` itself)

    def __str__(self) -> str:
        how = f"{self.name} calls {self.binds}" if self.binds else f"binds {self.name} itself"
        return f"{self.exercise}.{self.name} <- {self.lesson} cell {self.cell} ({how})"


def _python(source: str) -> ast.Module | None:
    try:
        return ast.parse(TransformerManager().transform_cell(source))
    except SyntaxError:
        return None


GENERIC = {"make", "get", "the", "of", "to", "a", "self", "fn", "x", "args", "kwargs", "model", "inputs", "module"}


def words(name: str) -> set[str]:
    """``count_compiles`` -> {count, compiles}; ``FixedGatedMLP`` -> {fixed, gated, mlp}; generic words dropped."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|_", " ", name)
    return {w.lower() for w in spaced.split()} - GENERIC


@dataclass(frozen=True)
class Shape:
    """What a name is, as far as a caller can tell: a class or a function, the positional arguments it takes, and
    the words of its name and parameters."""

    is_class: bool
    required: int
    most: float  # positional arguments it accepts (inf with *args)
    keyword_only_required: bool = False
    params: frozenset[str] = frozenset()

    def accepts(self, stub: Shape) -> bool:
        """Whether what the checks pass to ``stub`` (its required positional arguments, and at most all of them)
        can be passed to this."""
        return (
            self.is_class == stub.is_class
            and not self.keyword_only_required
            and self.required <= stub.most
            and self.most >= stub.required
        )


def plausible(name: str, shape: Shape, other: str, stub: Shape) -> bool:
    """A learner would rename ``other`` to ``name`` only if it looks like the same tool: callable the same way, and
    a word of its name, or two of its parameters, in common."""
    if not shape.accepts(stub):
        return False
    return bool(words(name) & words(other)) or len((shape.params & stub.params) - GENERIC) >= 2


def _shape_of_args(args: ast.arguments, skip_self: bool) -> tuple[int, float, bool, frozenset[str]]:
    positional = args.posonlyargs + args.args
    if skip_self and positional:
        positional = positional[1:]
    required = len(positional) - len(args.defaults)
    most = float("inf") if args.vararg else len(positional)
    kw_required = any(d is None for d in args.kw_defaults)
    names = frozenset(a.arg for a in positional + args.kwonlyargs)
    return max(required, 0), most, kw_required, names


def _shape_of_node(node: ast.AST) -> Shape | None:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return Shape(False, *_shape_of_args(node.args, skip_self=False))
    if isinstance(node, ast.ClassDef):
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is None:
            return Shape(True, 0, float("inf"))  # inherited: anything a base takes
        return Shape(True, *_shape_of_args(init.args, skip_self=True))
    return None


def _shape_of_object(obj: object) -> Shape | None:
    if not callable(obj):
        return None
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    positional = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = sum(p.default is p.empty for p in positional)
    most = float("inf") if any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values()) else len(positional)
    kw_required = any(p.kind == p.KEYWORD_ONLY and p.default is p.empty for p in sig.parameters.values())
    return Shape(inspect.isclass(obj), required, most, kw_required, frozenset(sig.parameters))


def stub_shapes(exercise: str) -> dict[str, tuple[int, Shape]]:
    """Each interface name's answer cell in the reference solution, and how the checks can call it."""
    nb = nbformat.read(ROOT / "solutions" / NOTEBOOKS[exercise], as_version=4)
    out: dict[str, tuple[int, Shape]] = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or SOLUTION_MARK not in cell.source:
            continue
        tree = _python(cell.source)
        for node in tree.body if tree else ():
            name = getattr(node, "name", None)
            shape = _shape_of_node(node)
            if name in INTERFACE[exercise] and shape is not None:
                out[name] = (i, shape)
    return out


def rename(name: str, other: str, shape: Shape) -> str:
    """``name`` made to be ``other`` in a way the grader loads (it runs definitions, not ``name = other``)."""
    if shape.is_class:
        return f"class {name}({other}):\n    pass\n"
    return f"def {name}(*args, **kwargs):\n    return {other}(*args, **kwargs)\n"


def _imports(tree: ast.Module) -> list[str]:
    return [ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]


def _kit_imports(tree: ast.Module) -> dict[str, object]:
    """Names a cell imports from the course kit, resolved to the objects."""
    found: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in KIT_MODULES:
            module = importlib.import_module(node.module)
            for alias in node.names:
                if alias.name != "*" and hasattr(module, alias.name):
                    found[alias.asname or alias.name] = getattr(module, alias.name)
    return found


def pastes(exercise: str, lesson_path: str | None = None) -> Iterator[Paste]:
    """Every paste of a cell of the exercise's lesson that the checks could call as one of the exercise's names."""
    lesson_path = lesson_path or f"notebooks/{lesson(exercise).notebook}"
    nb = nbformat.read(ROOT / lesson_path, as_version=4)
    trees = [(i, c.source, _python(c.source)) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    imports = [line for _, _, tree in trees if tree for line in _imports(tree)]
    header = "\n".join(dict.fromkeys(imports))  # the lesson's imports, each once, in order
    for name, (_, stub) in stub_shapes(exercise).items():
        for i, source, tree in trees:
            if tree is None:
                continue
            local = {getattr(n, "name", None): _shape_of_node(n) for n in tree.body}
            local.pop(None, None)
            bound = {k: v for k, v in local.items() if v is not None}
            bound.update({k: s for k, obj in _kit_imports(tree).items() if (s := _shape_of_object(obj)) is not None})
            pasted = f"{header}\n\n{source}"
            if name in local:
                yield Paste(exercise, name, lesson_path, i, pasted, "")
                continue
            for other, shape in bound.items():
                if other == name:  # the cell imports the very name: pasting it is enough
                    yield Paste(exercise, name, lesson_path, i, pasted, "")
                elif plausible(name, shape, other, stub):
                    yield Paste(exercise, name, lesson_path, i, f"{pasted}\n\n{rename(name, other, shape)}", other)


def paste_rounds(candidates: list[Paste]) -> list[dict[str, Paste]]:
    """Pastes grouped so that each round pastes at most one cell per name: one graded notebook per round."""
    rounds: list[dict[str, Paste]] = []
    for paste in candidates:
        slot = next((r for r in rounds if paste.name not in r), None)
        if slot is None:
            slot = {}
            rounds.append(slot)
        slot[paste.name] = paste
    return rounds


def write_round(exercise: str, pasted: dict[str, Paste], path: Path) -> Path:
    """The reference solution with each pasted name's answer cell replaced by its paste."""
    nb = nbformat.read(ROOT / "solutions" / NOTEBOOKS[exercise], as_version=4)
    cells = stub_shapes(exercise)
    for name, paste in pasted.items():
        cell = nb.cells[cells[name][0]]
        cell.source = f"{without(cell.source, name)}\n\n{paste.source}"
    nbformat.write(nb, path)
    return path


def without(source: str, name: str) -> str:
    """An answer cell's source with the top-level definition of ``name`` cut out (a cell may define several
    interface names; the others stay)."""
    tree = _python(source)
    lines = source.splitlines()
    for node in tree.body if tree else ():
        if getattr(node, "name", None) == name:
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
            del lines[first : node.end_lineno]
            break
    else:
        raise ValueError(f"the answer cell does not define {name}")
    return "\n".join(lines)
