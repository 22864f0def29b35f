"""A static scan of a submission's code for known grading tricks: pointers for an instructor's review.

Flags change no points. Grades rest on the judge, a process that never runs learner code (``grader.runner``),
and learner code runs sandboxed (``grader.sandbox``); hostile code has endless spellings, and this scan only
points an instructor at code worth reading.
"""

from __future__ import annotations

import ast
from dataclasses import asdict, dataclass

from grader.loader import BoundedTransformer, CellRewriteError

# module -> why importing it in an exercise is suspicious
SUSPICIOUS_IMPORTS = {
    "gc": "can reach the grading worker's objects in memory",
    "inspect": "can read the grading worker's frames and source",
    "ctypes": "can rewrite memory",
    "multiprocessing": "can talk to the grading worker's channel",
    "threading": "can run work outside the timed region",
    "subprocess": "can start processes",
    "socket": "can open network connections",
    "signal": "can interfere with timeouts",
}
GRADER_INTERNALS = (
    "grader.exercises",
    "grader.context",
    "grader.worker",
    "grader.runner",
    "grader.results",
    "grader.registry",
    "grader.learner",
    "grader.learner_failures",
    "grader.local_learner",
    "grader.worker_limits",
    "grader.worker_start",
    "grader.protocol",
    "grader.probing",
    "grader.sandbox",
    "grader.containment",
    "grader.speed",
)
PATCHABLE_ROOTS = {"torch", "time", "grader", "coursekit", "builtins", "statistics", "numpy", "sys", "os"}
SUSPICIOUS_CALLS = {
    ("os", "_exit"): "ends the grading process",
    ("sys", "exit"): "ends the grading process",
    ("os", "fork"): "forks the grading process",
    ("os", "kill"): "signals processes",
    ("cuda", "Stream"): "runs work on a side stream, outside the timed stream",
    ("cuda", "stream"): "runs work on a side stream, outside the timed stream",
    ("compiler", "set_stance"): (
        "changes how every compiled function runs (skip_guard_eval_unsafe, force_backend); the grader sets the stance "
        "each check needs and fails one whose counted calls ran under another"
    ),
    ("torch", "set_float32_matmul_precision"): (
        "trades float32 accuracy for speed (TF32 or bfloat16 matmuls); the grader sets it back before every check "
        "and fails one after which it changed, but not a switch turned on and off inside one call"
    ),
}
SECRET_STRINGS = ("grader/", "solutions/", "thresholds.toml", "GRADER_SECRET_SEED", "secret_seed")


@dataclass(frozen=True)
class Flag:
    """One finding: where, what, and whether it counts as tampering."""

    cell: int
    line: int
    kind: str  # "tamper" or "review"
    message: str

    def as_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return f"code cell {self.cell}, line {self.line}: {self.message}"


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> the top-level module it comes from (``import torch.nn.functional as F`` -> torch)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                names[a.asname or a.name] = node.module.split(".")[0]
    return names


def _scan_tree(tree: ast.AST, cell: int, aliases: dict[str, str]) -> list[Flag]:
    def origin(dotted: str) -> str:
        head = dotted.split(".")[0]
        return aliases.get(head, head)

    flags: list[Flag] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                root = name.split(".")[0]
                if root in SUSPICIOUS_IMPORTS:
                    flags.append(Flag(cell, line, "review", f"imports {name}, which {SUSPICIOUS_IMPORTS[root]}"))
                if name.startswith(GRADER_INTERNALS):
                    flags.append(Flag(cell, line, "tamper", f"imports the grader's internals ({name})"))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                dotted = _dotted(target) if isinstance(target, ast.Attribute) else ""
                if dotted and origin(dotted) in PATCHABLE_ROOTS:
                    flags.append(Flag(cell, line, "tamper", f"monkeypatches {dotted}"))
        elif isinstance(node, ast.Call):
            func = _dotted(node.func)
            if func in ("setattr", "delattr") and node.args and origin(_dotted(node.args[0])) in PATCHABLE_ROOTS:
                flags.append(Flag(cell, line, "tamper", f"{func}() on {_dotted(node.args[0])}"))
            tail = tuple(func.split(".")[-2:])
            if tail in SUSPICIOUS_CALLS:
                flags.append(Flag(cell, line, "review", f"calls {func}, which {SUSPICIOUS_CALLS[tail]}"))
            if func in ("exec", "eval", "__import__", "compile"):
                flags.append(Flag(cell, line, "review", f"calls {func}(), which hides code from this scan"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            hit = next((s for s in SECRET_STRINGS if s in node.value), None)
            if hit:
                flags.append(Flag(cell, line, "tamper", f"refers to {hit!r}: reading grader or solution files?"))
    return flags


def scan_cells(cells: list[str]) -> list[Flag]:
    """Flags for every code cell (cells that do not parse are skipped: the loader reports them)."""
    transformer = BoundedTransformer()
    trees: list[tuple[int, ast.AST]] = []
    pathological: list[Flag] = []
    for index, raw in enumerate(cells, start=1):
        try:
            trees.append((index, ast.parse(transformer.transform_cell(raw))))
        except SyntaxError:
            continue
        except CellRewriteError:  # not loaded either (the loader says why): nothing of it runs
            continue
        except (RecursionError, MemoryError, ValueError):  # pathological code: say so, and scan the others
            pathological.append(Flag(index, 0, "review", "this cell is too deeply nested or too large to scan"))
    aliases: dict[str, str] = {}
    for _, tree in trees:
        aliases.update(_aliases(tree))
    return bounded(pathological + [flag for index, tree in trees for flag in _scan_tree(tree, index, aliases)])


MAX_FLAGS = 100  # a report lists this many flags at most (red team, session 32: 300,000 tiny cells, 300,000 flags)


def bounded(flags: list[Flag]) -> list[Flag]:
    """``flags``, at most ``MAX_FLAGS``: tampering first, in cell order, then one flag that counts the rest."""
    if len(flags) <= MAX_FLAGS:
        return flags
    kept = sorted(sorted(flags, key=lambda f: f.kind != "tamper")[: MAX_FLAGS - 1], key=lambda f: (f.cell, f.line))
    rest = len(flags) - len(kept)
    return [*kept, Flag(0, 0, "review", f"and {rest} more flags like these, not listed: read the notebook itself")]
