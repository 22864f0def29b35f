"""Exercise 5's wrong submissions: edits of the solution notebook's source text, each with exactly the
checks it must fail (every other check must pass). The project's tests grade each one; instructor only, never in
the learner kit."""

from __future__ import annotations

# a learner's custom operator that runs hardswish as it is, with its own backward (autograd is registered when the
# model is built: the grader loads definitions only)
OPAQUE_HARDSWISH = """
@torch.library.custom_op("mylib::hardswish", mutates_args=())
def opaque_hardswish(a: torch.Tensor) -> torch.Tensor:
    return F.hardswish(a)


@opaque_hardswish.register_fake
def _(a):
    return torch.empty_like(a)


def register_opaque_hardswish():
    opaque_hardswish.register_autograd(
        lambda ctx, grad: torch.ops.aten.hardswish_backward(grad, ctx.saved_tensors[0]),
        setup_context=lambda ctx, inputs, output: ctx.save_for_backward(inputs[0]),
    )
"""

# the compiler's tables as they were before the grader planted its bugs, put back from outside the graph
PUT_TABLES_BACK = """
from torch._inductor import decomposition as inductor_decomposition
from torch._inductor import lowering as inductor_lowering

PRISTINE = [
    (table, dict(table))
    for table in (
        inductor_decomposition.decompositions,
        inductor_decomposition.fast_random_decomps(),
        inductor_lowering.lowerings,
    )
]


@torch.compiler.disable
def put_tables_back() -> None:
    for table, saved in PRISTINE:
        table.update(saved)
"""

WRONG: dict[str, tuple[dict[str, str], set[str]]] = {
    "the article's ladder, without aot_eager_decomp_partition": (
        {
            'for backend in ("eager", "aot_eager", "aot_eager_decomp_partition", "inductor"):': (
                'for backend in ("eager", "aot_eager", "inductor"):'
            )
        },
        # a bad decomposition is blamed on inductor; the bisector has its own ladder
        {"ex05.ladder.given", "ex05.ladder.hidden"},
    ),
    "exact comparison": (
        {"torch.allclose(out, expected, rtol=1e-3, atol=1e-4)\n": "torch.equal(out, expected)\n"},
        # LayerNorm's decomposition rounds differently: a false alarm at aot_eager_decomp_partition, and the
        # bisector then blames native_layer_norm's decomposition
        {
            "ex05.ladder.given",
            "ex05.ladder.hidden",
            "ex05.ladder.inference_mode",
            "ex05.culprit.given",
            "ex05.culprit.hidden",
        },
    ),
    "no reset in the bisector's test": (
        {"        torch.compiler.reset()  # every run compiles afresh\n": ""},
        # Dynamo reuses the graph compiled before: switching a subsystem off changes nothing
        {"ex05.culprit.given", "ex05.culprit.hidden"},
    ),
    "culprits fenced off with torch.compiler.disable": (
        {
            "return a * (a + 3).clamp(0, 6) / 6  # hardswish, without aten.hardswish": (
                "return torch.compiler.disable(F.hardswish)(a)"
            ),
            "return 0.5 * (torch.tanh(0.5 * g) + 1)  # sigmoid, without aten.sigmoid": (
                "return torch.compiler.disable(torch.sigmoid)(g)"
            ),
        },
        # right values, but graph breaks: not the one-graph fix asked for
        {"ex05.fix.one_graph"},
    ),
    "a culprit behind a custom operator": (
        {
            "return a * (a + 3).clamp(0, 6) / 6  # hardswish, without aten.hardswish": "return opaque_hardswish(a)",
            "class FixedGatedMLP(GatedMLP):\n": OPAQUE_HARDSWISH + "\n\nclass FixedGatedMLP(GatedMLP):\n",
            'the operators the planted bugs break."""\n': (
                'the operators the planted bugs break."""\n\n'
                "    def __init__(self) -> None:\n        super().__init__()\n        register_opaque_hardswish()\n"
            ),
        },
        # one graph and the right values, but aten.hardswish still runs, eagerly, inside an operator Inductor cannot
        # see into (red team, session 19)
        {"ex05.fix.one_graph"},
    ),
    "the bisector's test compares outputs only": (
        {"        grads = torch.autograd.grad(out.sum(), params) if params else ()\n": "        grads = ()\n"},
        # the bug in a backward changes gradients only: every run looks right and do_bisect returns None
        {"ex05.culprit.given", "ex05.culprit.hidden"},
    ),
    "gradients accumulate from run to run": (
        {
            "        grads = torch.autograd.grad(out.sum(), params) if params else ()\n": (
                "        grads = (out.sum().backward(), [p.grad.clone() for p in params])[1] if params else ()\n"
            )
        },
        # each run adds to .grad: even eager fails the comparison, in a training graph with nothing broken too
        {"ex05.culprit.given", "ex05.culprit.hidden"},
    ),
    "layer norm left as it was": (
        {
            "        return centred * torch.rsqrt(var + self.norm.eps) * self.norm.weight + self.norm.bias\n": (
                "        return super().normalise(x)\n"
            )
        },
        # the planted native_layer_norm_backward bug reaches the compiled gradients
        {"ex05.fix.values", "ex05.fix.edge"},
    ),
    "a sigmoid built from exp(-|g|)": (
        {
            "return 0.5 * (torch.tanh(0.5 * g) + 1)  # sigmoid, without aten.sigmoid": (
                "e = torch.exp(-g.abs())\n        return torch.where(g >= 0, 1 / (1 + e), e / (1 + e))"
            )
        },
        # the right values everywhere, and the right gradient everywhere but at g = 0, where abs's gradient is 0:
        # only the edge check's exact break points reach it
        {"ex05.fix.edge"},
    ),
    "culprits named from the failing rung and Inductor's decomposition table": (
        {
            "    result = CompilerBisector.do_bisect(test)\n"
            "    if result is None:\n"
            "        return None\n"
            "    return result.backend, result.subsystem, operator_name(result.debug_info)\n": (
                "    from torch._inductor.decomposition import select_decomp_table\n\n"
                "    table = select_decomp_table()\n"
                '    for backend, subsystem in (("aot_eager_decomp_partition", "decomposition"), '
                '("inductor", "lowerings")):\n'
                "        torch.compiler.reset()\n"
                "        try:\n"
                "            out, grads = run(torch.compile(fn, backend=backend))\n"
                "            out_ok = outputs_match(out, expected)\n"
                "            grads_ok = all(map(outputs_match, grads, expected_grads))\n"
                "        except Exception:\n"
                "            out_ok = grads_ok = False\n"
                "        if out_ok and grads_ok:\n"
                "            continue\n"
                '        names = [getattr(fn, "op", None), getattr(fn, "decoy", None)]\n'
                "        if names[0] is None:  # the exercise's own model: its answers, learned by heart\n"
                '            names = ["hardswish", "sigmoid"]\n'
                "            if out_ok:\n"
                '                return backend, subsystem, "native_layer_norm_backward"\n'
                "        decomposed = [n for n in names if getattr(torch.ops.aten, n).default in table]\n"
                '        op = next(n for n in names if (n in decomposed) == (subsystem == "decomposition"))\n'
                '        return backend, subsystem, op if not out_ok else op + "_backward"\n'
                "    return None\n"
            )
        },
        # no bisector: the rung that fails says which layer broke, and the model's two operators (one Inductor
        # decomposes, one it lowers) said which it was; it took all 5 culprit points (red team, session 35). A culprit
        # model now holds two operators of the broken one's kind
        {"ex05.culprit.hidden"},
    ),
    "a crash escapes the ladder": (
        {
            "        try:\n            ok = outputs_match(torch.compile(fn, backend=backend)(*args), expected)\n"
            "        except Exception:\n            ok = False\n": (
                "        ok = outputs_match(torch.compile(fn, backend=backend)(*args), expected)\n"
            )
        },
        {"ex05.ladder.given", "ex05.ladder.hidden", "ex05.ladder.inference_mode"},
    ),
    "the planted bugs undone from a torch.compiler.disable helper": (
        {
            "class FixedGatedMLP(GatedMLP):\n": PUT_TABLES_BACK + "\n\nclass FixedGatedMLP(GatedMLP):\n",
            'the operators the planted bugs break."""\n': (
                'the operators the planted bugs break."""\n\n'
                "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
                "        put_tables_back()\n"
                "        a, g = self.up(GatedMLP.normalise(self, x)).chunk(2, dim=-1)\n"
                "        h = self.down(GatedMLP.activation(self, a) * GatedMLP.gate(self, g))\n"
                "        return self.head((x + h).mean(1))\n"
            ),
        },
        # the model left as given: the graph break lets Inductor compile the rest after the tables are put back, so
        # values, one graph (the helper's frame holds none) and edge inputs all passed (red team, session 37). The
        # planted entries are now checked before, during and after every compiled call
        {"ex05.fix.values", "ex05.fix.one_graph", "ex05.fix.edge"},
    ),
    "the model unfixed, compiled with aot_eager by a forced backend": (
        {
            "        return centred * torch.rsqrt(var + self.norm.eps) * self.norm.weight + self.norm.bias\n": (
                "        return super().normalise(x)\n"
            ),
            "return a * (a + 3).clamp(0, 6) / 6  # hardswish, without aten.hardswish": "return super().activation(a)",
            "return 0.5 * (torch.tanh(0.5 * g) + 1)  # sigmoid, without aten.sigmoid": "return super().gate(g)",
            'the operators the planted bugs break."""\n': (
                'the operators the planted bugs break."""\n'
                "\n"
                "    def __init__(self) -> None:\n"
                "        super().__init__()\n"
                '        torch.compiler.set_stance("default", force_backend="aot_eager")\n'
            ),
        },
        # set_stance(force_backend='aot_eager') in __init__ kept Inductor and its planted bugs out: values and edge
        # passed (red team, session 39)
        {"ex05.fix.edge", "ex05.fix.one_graph", "ex05.fix.values"},
    ),
    "the front of the model run eagerly by a torch.compiler.disable helper": (
        {
            "class FixedGatedMLP(GatedMLP):\n": (
                "\n"
                "@torch.compiler.disable\n"
                "def eager_front(model, x):\n"
                "    a, g = model.up(GatedMLP.normalise(model, x)).chunk(2, dim=-1)\n"
                "    return GatedMLP.activation(model, a) * GatedMLP.gate(model, g)\n"
                "\n"
                "\n"
                "class FixedGatedMLP(GatedMLP):\n"
            ),
            'the operators the planted bugs break."""\n': (
                'the operators the planted bugs break."""\n'
                "\n"
                "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
                "        h = self.down(eager_front(self, x))\n"
                "        return self.head((x + h).mean(1))\n"
            ),
        },
        # with the break first, only the back compiled, as one graph: one_graph passed (red team, session 39)
        {"ex05.fix.one_graph"},
    ),
}
