"""Exercise 6's wrong submissions: edits of the solution notebook's source text, each with exactly the
checks it must fail (every other check must pass). The project's tests grade each one; instructor only, never in
the learner kit."""

from __future__ import annotations

WRONG: dict[str, tuple[dict[str, str], set[str]]] = {
    "float learning rate": (
        {"lr=torch.tensor(lr)": "lr=lr"},
        # right values, but the scheduler's first new rate recompiles the optimizer step
        {"ex06.optimizer.tensor_lr", "ex06.step.no_recompile", "ex06.step.other_schedules"},
    ),
    "the whole model compiled in place": (
        {
            "    for block in model.blocks:\n        block.compile(backend=backend)\n": (
                "    model.compile(backend=backend)\n"
            )
        },
        # right values and keys, but one graph of every block: no cheaper cold start
        {"ex06.regional.one_graph", "ex06.regional.other_model", "ex06.regional.compile_time"},
    ),
    "blocks wrapped in torch.compile, gradients never cleared": (
        {
            "    for block in model.blocks:\n        block.compile(backend=backend)\n": (
                "    for i, block in enumerate(model.blocks):\n"
                "        model.blocks[i] = torch.compile(block, backend=backend)\n"
            ),
            "        optimizer.zero_grad(set_to_none=True)\n": "",
        },
        # two independent slips: '_orig_mod.' in the state_dict keys; gradients that pile up from step 2
        {"ex06.regional.values", "ex06.regional.other_model", "ex06.step.values", "ex06.step.other_schedules"},
    ),
}

# The edits that turn the solution into the baseline its speed checks time against (tools/speed_trials.py):
# every reference run must pass those checks and every baseline run fail them.
BASELINE: dict[str, str] = {
    "    for block in model.blocks:\n        block.compile(backend=backend)\n": "    model.compile(backend=backend)\n"
}

# The speed checks a wrong submission above fails by measurement, not by a wrong value: the kit's tests grade
# them for it alone, with nothing else running (`pytest -m timing`), as they grade the reference's.
MEASURED: dict[str, set[str]] = {"the whole model compiled in place": {"ex06.regional.compile_time"}}
