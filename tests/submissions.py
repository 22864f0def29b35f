"""Build deliberately wrong submissions from the solution notebook, by editing its source text."""

from __future__ import annotations

from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SOLUTION_01 = ROOT / "solutions" / "01_cross_entropy_ladder.ipynb"
EXERCISE_01 = ROOT / "exercises" / "01_cross_entropy_ladder.ipynb"
SOLUTION_02 = ROOT / "solutions" / "02_graph_breaks.ipynb"
EXERCISE_02 = ROOT / "exercises" / "02_graph_breaks.ipynb"
SOLUTION_04 = ROOT / "solutions" / "04_dynamic_shapes.ipynb"
EXERCISE_04 = ROOT / "exercises" / "04_dynamic_shapes.ipynb"


def variant(solution: Path, out: Path, edits: dict[str, str]) -> Path:
    """Copy ``solution`` to ``out`` replacing each ``old`` text with ``new``; every edit must apply once."""
    nb = nbformat.read(solution, as_version=4)
    for old, new in edits.items():
        hits = [c for c in nb.cells if c.cell_type == "code" and old in c.source]
        if len(hits) != 1:
            raise ValueError(f"edit {old!r} matches {len(hits)} code cells, expected exactly 1")
        hits[0].source = hits[0].source.replace(old, new)
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)
    return out


# Each wrong submission: the edit, and exactly the checks it must fail (all others must pass).
WRONG_01: dict[str, tuple[dict[str, str], set[str]]] = {
    "sync in the step": (
        {"    optimizer.step()\n    return loss.detach()":
         "    optimizer.step()\n    if not torch.isfinite(loss):\n        raise FloatingPointError('loss diverged')\n"
         "    return loss.detach()"},
        {"ex01.train_step.no_sync"},
    ),
    "assert in the loss": (
        {"        logp = torch.log_softmax(logits, dim=-1)\n":
         "        assert target.max() < logits.shape[-1]\n        logp = torch.log_softmax(logits, dim=-1)\n"},
        # torch.compile turns an assert on a tensor into an async device-side assert: no graph break
        {"ex01.smoothed_ce.no_host_traffic"},
    ),
    "wrong reduction (mean over rows)": (
        {"/ target_weight.sum()": "/ keep.sum()"},
        {"ex01.smoothed_ce.values", "ex01.smoothed_ce.gradients", "ex01.compiled.values",
         "ex01.smoothed_ce.speed", "ex01.compiled.speed"},
    ),
    "unstable log-softmax": (
        {"logp = torch.log_softmax(logits, dim=-1)": "logp = logits - logits.exp().sum(-1, keepdim=True).log()"},
        {"ex01.smoothed_ce.gradients", "ex01.compiled.values"},
    ),
    "weights rebuilt every call": (
        {'        self.register_buffer("weight", torch.tensor(class_weights, dtype=torch.float32))':
         "        self.class_weights = list(class_weights)",
         "        weight = self.weight.to(logp.dtype)":
         "        weight = torch.tensor(self.class_weights, dtype=logp.dtype, device=logits.device)"},
        # compiled, the Python list becomes a constant of the graph: only the eager rung pays
        {"ex01.smoothed_ce.no_host_traffic"},
    ),
}

WRONG_02: dict[str, tuple[dict[str, str], set[str]]] = {
    "one break left (a print)": (
        {"        scores = self.head(h)\n": "        print(f'scoring {x.shape[0]} rows')\n        scores = self.head(h)\n"},
        {"ex02.scorer.no_breaks", "ex02.scorer.compiles_once"},
    ),
    "a fix that changes results (mean over all rows)": (
        {"        h = h - (h * real).sum(0) / real.sum()": "        h = h - h.mean(0)"},
        {"ex02.scorer.outputs", "ex02.scorer.gradients", "ex02.scorer.speed"},
    ),
    "custom op without a fake implementation": (
        {"@calibrate.register_fake\ndef _(top: torch.Tensor) -> torch.Tensor:\n    ### BEGIN SOLUTION\n"
         "    return torch.empty_like(top)\n    ### END SOLUTION": ""},
        {"ex02.calibrate.opcheck", "ex02.scorer.no_breaks", "ex02.scorer.compiles_once", "ex02.scorer.speed"},
    ),
}

WRONG_04: dict[str, tuple[dict[str, str], set[str]]] = {
    "padding without a mask": (
        {"        weights = mask.unsqueeze(-1).to(h.dtype)\n        pooled = (h * weights).sum(1) / weights.sum(1)":
         "        pooled = h.mean(1)"},
        {"ex04.tagger.outputs", "ex04.stream.outputs"},
    ),
    "a bucket per length": (
        {"    for bucket in BUCKETS:\n        if n <= bucket:\n            return bucket\n": "    return n\n"},
        {"ex04.collate.layout", "ex04.stream.compile_bound", "ex04.stream.no_recompile_after_warmup"},
    ),
    "the call counter left in": (
        {"        h = self.embed(tokens)\n        h = h + F.gelu": "        self.calls += 1\n"
         "        h = self.embed(tokens) * min(1.0, self.calls)\n        h = h + F.gelu"},
        {"ex04.stream.compile_bound", "ex04.stream.no_recompile_after_warmup"},
    ),
}

# exercise -> (solution, unmodified exercise, wrong submissions)
EXERCISES = {
    "ex01": (SOLUTION_01, EXERCISE_01, WRONG_01),
    "ex02": (SOLUTION_02, EXERCISE_02, WRONG_02),
    "ex04": (SOLUTION_04, EXERCISE_04, WRONG_04),
}
