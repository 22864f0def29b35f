"""Build deliberately wrong submissions from the solution notebook, by editing its source text."""

from __future__ import annotations

from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SOLUTION_00 = ROOT / "solutions" / "00_orientation.ipynb"
EXERCISE_00 = ROOT / "exercises" / "00_orientation.ipynb"
SOLUTION_01 = ROOT / "solutions" / "01_cross_entropy_ladder.ipynb"
EXERCISE_01 = ROOT / "exercises" / "01_cross_entropy_ladder.ipynb"
SOLUTION_02 = ROOT / "solutions" / "02_graph_breaks.ipynb"
EXERCISE_02 = ROOT / "exercises" / "02_graph_breaks.ipynb"
SOLUTION_03 = ROOT / "solutions" / "03_distillation.ipynb"
EXERCISE_03 = ROOT / "exercises" / "03_distillation.ipynb"
SOLUTION_04 = ROOT / "solutions" / "04_dynamic_shapes.ipynb"
EXERCISE_04 = ROOT / "exercises" / "04_dynamic_shapes.ipynb"
SOLUTION_05 = ROOT / "solutions" / "05_debugging_compile.ipynb"
EXERCISE_05 = ROOT / "exercises" / "05_debugging_compile.ipynb"
SOLUTION_06 = ROOT / "solutions" / "06_compile_time.ipynb"
EXERCISE_06 = ROOT / "exercises" / "06_compile_time.ipynb"


def variant(solution: Path, out: Path, edits: dict[str, str], append: tuple[str, ...] = ()) -> Path:
    """Copy ``solution`` to ``out`` replacing each ``old`` text with ``new`` (every edit must apply once), then
    append a code cell for each of ``append``."""
    nb = nbformat.read(solution, as_version=4)
    for old, new in edits.items():
        hits = [c for c in nb.cells if c.cell_type == "code" and old in c.source]
        if len(hits) != 1:
            raise ValueError(f"edit {old!r} matches {len(hits)} code cells, expected exactly 1")
        hits[0].source = hits[0].source.replace(old, new)
    nb.cells += [nbformat.v4.new_code_cell(source) for source in append]
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)
    return out


# Each wrong submission: the edit, and exactly the checks it must fail (all others must pass).
WRONG_00: dict[str, tuple[dict[str, str], set[str]]] = {
    "dynamic setting ignored": (
        {"torch.compile(fn, backend=counter, dynamic=dynamic)": "torch.compile(fn, backend=counter)"},
        {"ex00.recompiles.count", "ex00.recompiles.unseen"},
    ),
    "no reset before counting": (
        {"    torch.compiler.reset()\n    counter = CompileCounter()": "    counter = CompileCounter()"},
        # the first count is right; asked again, the compiled versions left over hit the recompile limit
        {"ex00.recompiles.unseen"},
    ),
    "no reset before capturing": (
        {"    torch.compiler.reset()\n    graphs = []": "    graphs = []"},
        # a second capture of the same function at another size is dynamic: the graph takes the size as an input
        {"ex00.capture.branches"},
    ),
    "fx.symbolic_trace instead of Dynamo": (
        {"    torch.compile(fn, backend=backend, fullgraph=True)(*args)\n    return graphs[-1]":
         "    return torch.fx.symbolic_trace(fn)"},
        {"ex00.capture.branches"},
    ),
    "uncompiled function handed to run_and_get_code": (
        {"run_and_get_code(compiled, *args)": "run_and_get_code(fn, *args)"},
        {"ex00.inductor.code"},
    ),
}

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

WRONG_03: dict[str, tuple[dict[str, str], set[str]]] = {
    "teacher receives gradients": (
        {"        self.teacher = teacher.eval().requires_grad_(False)": "        self.teacher = teacher.eval()",
         "        with torch.no_grad():\n            teacher_logits = self.teacher(images)":
         "        teacher_logits = self.teacher(images)"},
        {"ex03.distiller.gradients", "ex03.step.training"},
    ),
    "the T**2 factor left out": (
        {"return self.alpha * temp * temp * soft": "return self.alpha * soft"},
        # Distiller itself is right: its check compares it with the learner's own DistillLoss (the formula's
        # reference does not ship in the kit), so a loss bug costs the loss checks, not Distiller's too
        {"ex03.loss.values", "ex03.loss.temperature", "ex03.loss.bf16", "ex03.step.training"},
    ),
    "teacher under inference_mode": (
        {"        with torch.no_grad():\n            teacher_logits": "        with torch.inference_mode():\n"
         "            teacher_logits"},
        # eager, the teacher's inference tensors only feed new tensors: the eager checks pass
        {"ex03.step.training", "ex03.step.no_graph_breaks", "ex03.step.no_recompile", "ex03.step.speed"},
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

WRONG_05: dict[str, tuple[dict[str, str], set[str]]] = {
    "the article's ladder, without aot_eager_decomp_partition": (
        {'for backend in ("eager", "aot_eager", "aot_eager_decomp_partition", "inductor"):':
         'for backend in ("eager", "aot_eager", "inductor"):'},
        # a bad decomposition is blamed on inductor; the bisector has its own ladder
        {"ex05.ladder.given", "ex05.ladder.hidden"},
    ),
    "exact comparison": (
        {"torch.allclose(out, expected, rtol=1e-3, atol=1e-4))": "torch.equal(out, expected))"},
        # LayerNorm's decomposition rounds differently: a false alarm at aot_eager_decomp_partition, and the
        # bisector then blames native_layer_norm's decomposition
        {"ex05.ladder.given", "ex05.ladder.hidden", "ex05.ladder.inference_mode", "ex05.culprit.given",
         "ex05.culprit.hidden"},
    ),
    "no reset in the bisector's test": (
        {"        torch.compiler.reset()  # every run compiles afresh\n": ""},
        # Dynamo reuses the graph compiled before: switching a subsystem off changes nothing
        {"ex05.culprit.given", "ex05.culprit.hidden"},
    ),
    "culprits fenced off with torch.compiler.disable": (
        {"return a * (a + 3).clamp(0, 6) / 6  # hardswish, without aten.hardswish":
         "return torch.compiler.disable(F.hardswish)(a)",
         "return 0.5 * (torch.tanh(0.5 * g) + 1)  # sigmoid, without aten.sigmoid":
         "return torch.compiler.disable(torch.sigmoid)(g)"},
        # right values, but graph breaks: not the one-graph fix asked for
        {"ex05.fix.one_graph"},
    ),
    "a crash escapes the ladder": (
        {"        try:\n            ok = outputs_match(torch.compile(fn, backend=backend)(*args), expected)\n"
         "        except Exception:\n            ok = False\n":
         "        ok = outputs_match(torch.compile(fn, backend=backend)(*args), expected)\n"},
        {"ex05.ladder.given", "ex05.ladder.hidden", "ex05.ladder.inference_mode"},
    ),
}

WRONG_06: dict[str, tuple[dict[str, str], set[str]]] = {
    "float learning rate": (
        {"lr=torch.tensor(lr)": "lr=lr"},
        # right values, but the scheduler's first new rate recompiles the optimizer step
        {"ex06.optimizer.tensor_lr", "ex06.step.no_recompile", "ex06.step.other_schedules"},
    ),
    "the whole model compiled in place": (
        {"    for block in model.blocks:\n        block.compile(backend=backend)\n": "    model.compile(backend=backend)\n"},
        # right values and keys, but one graph of every block: no cheaper cold start
        {"ex06.regional.one_graph", "ex06.regional.other_model", "ex06.regional.compile_time"},
    ),
    "blocks wrapped in torch.compile, gradients never cleared": (
        {"    for block in model.blocks:\n        block.compile(backend=backend)\n":
         "    for i, block in enumerate(model.blocks):\n        model.blocks[i] = torch.compile(block, backend=backend)\n",
         "        optimizer.zero_grad(set_to_none=True)\n": ""},
        # two independent slips: '_orig_mod.' in the state_dict keys; gradients that pile up from step 2
        {"ex06.regional.values", "ex06.regional.other_model", "ex06.step.values", "ex06.step.other_schedules"},
    ),
}

# exercise -> (solution, unmodified exercise, wrong submissions)
EXERCISES = {
    "ex00": (SOLUTION_00, EXERCISE_00, WRONG_00),
    "ex01": (SOLUTION_01, EXERCISE_01, WRONG_01),
    "ex02": (SOLUTION_02, EXERCISE_02, WRONG_02),
    "ex03": (SOLUTION_03, EXERCISE_03, WRONG_03),
    "ex04": (SOLUTION_04, EXERCISE_04, WRONG_04),
    "ex05": (SOLUTION_05, EXERCISE_05, WRONG_05),
    "ex06": (SOLUTION_06, EXERCISE_06, WRONG_06),
}
