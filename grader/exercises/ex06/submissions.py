"""Exercise 6's wrong submissions: edits of the solution notebook's source text, each with exactly the
checks it must fail (every other check must pass). The project's tests grade each one; instructor only, never in
the learner kit."""

from __future__ import annotations

LOOP = (
    "    for module in model.modules():\n"
    "        if isinstance(module, block_types):\n"
    "            module.compile(backend=backend)  # in place: the state_dict keys stay as they are\n"
)
# `make test` grades this exercise's first-listed wrong submissions only on the checks they must fail, and
# `make test-compat` on the rest (tests/test_grader.py): float learning rates took 52.8 s graded whole and 42.3 s
# split, one rate for the whole model 24.1 s and 13.9 s (session 23's fresh clone). Exercises 2-5 grade whole:
# there the checks share the submission's compiles, and a second grading costs more than it saves
SPLIT_GRADING = True
# each block's forward compiled inside an autograd.Function, where grad mode is off: no backward is traced, and
# the backward recomputes the block eagerly (red team, session 35: the whole body compiled this way passed the
# timed cold capture at 1.9x-2.1x against 2.0 required, the whole model with its backward 1.1x)
FORWARD_ONLY = """def forward_only(module, backend):
    fast, eager, params = torch.compile(module.forward, backend=backend), module.forward, list(module.parameters())

    class Recompute(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, *weights):
            ctx.save_for_backward(x)
            return fast(x)

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            with torch.enable_grad():
                x = x.detach().requires_grad_(True)
                return torch.autograd.grad(eager(x), [x, *params], grad, allow_unused=True)

    module.forward = lambda x: Recompute.apply(x, *params)


def compile_blocks("""
WRONG: dict[str, tuple[dict[str, str], set[str]]] = {
    "float learning rates": (
        {
            '"lr": torch.tensor(lr)}': '"lr": lr}',
            '"lr": torch.tensor(HEAD_LR_SCALE * lr)}': '"lr": HEAD_LR_SCALE * lr}',
        },
        # right values, but the scheduler's first new rate recompiles the optimizer step
        {"ex06.optimizer.tensor_lr", "ex06.step.no_recompile", "ex06.step.other_schedules"},
    ),
    "the whole model compiled in place": (
        {LOOP: ("    model.compile(backend=backend)\n")},
        # right values and keys, but one graph of every block: no cheaper cold start
        {"ex06.regional.one_graph", "ex06.regional.other_model", "ex06.regional.compile_time"},
    ),
    "blocks compiled for inference, their backward recomputed eagerly": (
        {
            "def compile_blocks(": FORWARD_ONLY,
            LOOP: (
                "    for module in model.modules():\n"
                "        if isinstance(module, block_types):\n"
                "            forward_only(module, backend)\n"
            ),
        },
        # the right values and gradients, one graph per kind, but no compiled backward
        {"ex06.regional.one_graph", "ex06.regional.other_model", "ex06.regional.compile_time"},
    ),
    "the head's rate a float": (
        {'"lr": torch.tensor(HEAD_LR_SCALE * lr)}': '"lr": HEAD_LR_SCALE * lr}'},
        # a group's own float overrides the tensor: right values, but every new rate recompiles the step
        {"ex06.optimizer.tensor_lr", "ex06.step.no_recompile", "ex06.step.other_schedules"},
    ),
    "one learning rate for the whole model": (
        {
            '        {"params": body, "lr": torch.tensor(lr)},\n'
            '        {"params": head, "lr": torch.tensor(HEAD_LR_SCALE * lr)},'
            "  # a group's own rate: a tensor too\n": ('        {"params": body + head, "lr": torch.tensor(lr)},\n')
        },
        # lesson 6's optimizer: no recompile, but the head learns at the body's rate
        {"ex06.optimizer.tensor_lr", "ex06.step.values", "ex06.step.other_schedules"},
    ),
    "the lesson's loop over model.blocks": (
        {LOOP: "    for block in model.blocks:\n        block.compile(backend=backend)\n"},
        # the hybrid model has no blocks attribute; the lesson's ViT (the timed check) has
        {"ex06.regional.values", "ex06.regional.one_graph", "ex06.regional.other_model"},
    ),
    "one kind of block left eager": (
        {"        if isinstance(module, block_types):\n": "        if isinstance(module, block_types[-1]):\n"},
        # right values, but the Mixer blocks run eagerly: one graph where the hybrid needs two
        {"ex06.regional.one_graph", "ex06.regional.other_model"},
    ),
    "blocks wrapped in torch.compile, gradients never cleared": (
        {
            LOOP: (
                "    for name, module in list(model.named_modules()):\n"
                "        if isinstance(module, block_types):\n"
                "            parent, _, child = name.rpartition('.')\n"
                "            setattr(model.get_submodule(parent), child, torch.compile(module, backend=backend))\n"
            ),
            "        optimizer.zero_grad(set_to_none=True)\n": "",
        },
        # two independent slips: '_orig_mod.' in the state_dict keys; gradients that pile up from step 2
        {"ex06.regional.values", "ex06.regional.other_model", "ex06.step.values", "ex06.step.other_schedules"},
    ),
    "float rates, only the first step compiled": (
        {
            '"lr": torch.tensor(lr)}': '"lr": lr}',
            '"lr": torch.tensor(HEAD_LR_SCALE * lr)}': '"lr": HEAD_LR_SCALE * lr}',
            "    criterion = loss_fn()\n": "    criterion, done = loss_fn(), []\n",
            "        update()\n": (
                "        if done:  # every later step eager: the new rates never reach a compiled graph\n"
                "            optimizer.step()\n"
                "            scheduler.step()\n"
                "        else:\n"
                "            update()\n"
                "        done.append(1)\n"
            ),
        },
        # right values and no recompile counted, since only the first step compiles (red team, session 19: it
        # had passed both recompile checks)
        {"ex06.optimizer.tensor_lr", "ex06.step.no_recompile", "ex06.step.other_schedules"},
    ),
    "one block of each kind compiled": (
        {
            LOOP: (
                "    kinds = set()\n"
                "    for module in model.modules():\n"
                "        if isinstance(module, block_types) and type(module) not in kinds:\n"
                "            kinds.add(type(module))\n"
                "            module.compile(backend=backend)\n"
            )
        },
        # one graph per kind and the right values, but the other blocks run eagerly (red team, session 19: it had
        # taken every regional point, its cold capture 5.8x against the reference's 4.8x)
        {"ex06.regional.one_graph", "ex06.regional.other_model", "ex06.regional.compile_time"},
    ),
    "eager blocks that also call a compiled one": (
        {
            LOOP: (
                "    first = {}\n"
                "    for module in model.modules():\n"
                "        if isinstance(module, block_types) and type(module) not in first:\n"
                "            module.compile(backend=backend)\n"
                "            first[type(module)] = module\n"
                "        elif isinstance(module, block_types):  # eager, plus a call of the compiled twin\n"
                "            own, twin = module.forward, first[type(module)]\n"
                "            module.forward = lambda x, own=own, twin=twin: (twin(x.detach()), own(x))[1]\n"
            )
        },
        # as many compiled linear-layer calls as the reference, but each eager block feeds the compiled twin its
        # input, not its weights (a review of session 20's fix, which had counted calls only)
        {"ex06.regional.one_graph", "ex06.regional.other_model", "ex06.regional.compile_time"},
    ),
    "float rates, a token compiled update every step": (
        {
            '"lr": torch.tensor(lr)}': '"lr": lr}',
            '"lr": torch.tensor(HEAD_LR_SCALE * lr)}': '"lr": HEAD_LR_SCALE * lr}',
            "    criterion = loss_fn()\n": (
                "    criterion, done = loss_fn(), []\n"
                "    token = torch.compile(lambda t: torch.addcmul(t, t, t), backend=backend)\n"
            ),
            "        update()\n": (
                "        if done:  # the real update eager, a compiled addcmul of nothing beside it\n"
                "            optimizer.step()\n"
                "            scheduler.step()\n"
                "            token(torch.ones(1))\n"
                "        else:\n"
                "            update()\n"
                "        done.append(1)\n"
            ),
        },
        # a graph with addcmul runs every step, but not over the model's parameters (a review of session 20's fix)
        {"ex06.optimizer.tensor_lr", "ex06.step.no_recompile", "ex06.step.other_schedules"},
    ),
    "float rates, the update eager beside a compiled addcmul of every parameter": (
        {
            '"lr": torch.tensor(lr)}': '"lr": lr}',
            '"lr": torch.tensor(HEAD_LR_SCALE * lr)}': '"lr": HEAD_LR_SCALE * lr}',
            "    criterion = loss_fn()\n": (
                "    criterion = loss_fn()\n"
                '    params = [p for group in optimizer.param_groups for p in group["params"]]\n'
                "    token = torch.compile(lambda ps: [torch.addcmul(p, p, p) for p in ps], backend=backend)\n"
            ),
            "        update()\n": (
                "        optimizer.step()  # eager: the new float rates never reach a compiled graph\n"
                "        scheduler.step()\n"
                "        with torch.no_grad():\n"
                "            token(params)  # out of place: reads every parameter, updates none\n"
            ),
        },
        # a graph holding addcmul reads every parameter each step, so the compiled-update count was satisfied while
        # the update ran eagerly (red team, session 37: 13 of 14 points; with tensor rates 14 of 14)
        {"ex06.optimizer.tensor_lr", "ex06.step.no_recompile", "ex06.step.other_schedules"},
    ),
    "float rates, AdamW by hand into copies, written back by a compiled graph": (
        {
            '"lr": torch.tensor(lr)}': '"lr": lr}',
            '"lr": torch.tensor(HEAD_LR_SCALE * lr)}': '"lr": HEAD_LR_SCALE * lr}',
            "    criterion = loss_fn()\n": (
                "    criterion, moments, count = loss_fn(), {}, [0]\n"
                '    params = [p for group in optimizer.param_groups for p in group["params"]]\n'
                "    write_back = torch.compile(\n"
                "        lambda ps, news: [p.copy_(torch.addcmul(n, n, n, value=0.0)) for p, n in zip(ps, news)],\n"
                "        backend=backend,\n"
                "    )\n"
            ),
            "        update()\n": (
                "        count[0] += 1\n"
                "        news = []\n"
                "        with torch.no_grad():  # AdamW by hand, eager, into copies: the float rates stay out\n"
                "            for group in optimizer.param_groups:\n"
                '                lr, (b1, b2) = group["lr"], group["betas"]\n'
                '                for p in group["params"]:\n'
                "                    m, v = moments.setdefault(p, (torch.zeros_like(p), torch.zeros_like(p)))\n"
                "                    m.lerp_(p.grad, 1 - b1)\n"
                "                    v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)\n"
                '                    denom = v.sqrt() / (1 - b2 ** count[0]) ** 0.5 + group["eps"]\n'
                '                    new = p * (1 - lr * group["weight_decay"])\n'
                "                    news.append(new.addcdiv(m, denom, value=-lr / (1 - b1 ** count[0])))\n"
                "            write_back(params, news)  # the only write to the parameters, in a compiled graph\n"
                "        scheduler.step()\n"
            ),
        },
        # the right values, no recompile, and every parameter written by a compiled graph holding addcmul, with no
        # call of torch's AdamW update (the hole sessions 37-46 listed as open)
        {"ex06.optimizer.tensor_lr", "ex06.step.no_recompile", "ex06.step.other_schedules"},
    ),
    "float rates, AdamW by hand into copies, parameters and averages written back by one compiled graph": (
        {
            '"lr": torch.tensor(lr)}': '"lr": lr}',
            '"lr": torch.tensor(HEAD_LR_SCALE * lr)}': '"lr": HEAD_LR_SCALE * lr}',
            "    criterion = loss_fn()\n": (
                "    criterion, count = loss_fn(), [0]\n"
                '    params = [p for group in optimizer.param_groups for p in group["params"]]\n'
                "    for p in params:  # AdamW's own state, kept where the grader looks\n"
                '        optimizer.state[p] = {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(p),\n'
                '                              "exp_avg_sq": torch.zeros_like(p)}\n'
                "\n"
                "    def _write(ps, news, ms, new_ms):\n"
                "        for p, n in zip(ps, news):\n"
                "            p.copy_(torch.addcmul(n, n, n, value=0.0))\n"
                "        for m, n in zip(ms, new_ms):\n"
                "            m.copy_(n)\n"
                "\n"
                "    write_back = torch.compile(_write, backend=backend)\n"
            ),
            "        update()\n": (
                "        count[0] += 1\n"
                "        news, ms, new_ms = [], [], []\n"
                "        with torch.no_grad():  # AdamW by hand, eager, into copies: the float rates stay out\n"
                "            for group in optimizer.param_groups:\n"
                '                lr, (b1, b2) = group["lr"], group["betas"]\n'
                '                for p in group["params"]:\n'
                "                    st = optimizer.state[p]\n"
                '                    m = st["exp_avg"].lerp(p.grad, 1 - b1)\n'
                '                    v = st["exp_avg_sq"].mul(b2).addcmul_(p.grad, p.grad, value=1 - b2)\n'
                '                    denom = v.sqrt() / (1 - b2 ** count[0]) ** 0.5 + group["eps"]\n'
                '                    new = p * (1 - lr * group["weight_decay"])\n'
                "                    news.append(new.addcdiv(m, denom, value=-lr / (1 - b1 ** count[0])))\n"
                '                    ms += [st["exp_avg"], st["exp_avg_sq"]]\n'
                "                    new_ms += [m, v]\n"
                "            write_back(params, news, ms, new_ms)  # every write to parameters and averages, compiled\n"
                "        scheduler.step()\n"
            ),
        },
        # the session-47 cheat above with its averages kept in optimizer.state and copied in place by the same graph:
        # the right values, no recompile, every parameter and average written only by a graph holding addcmul
        # (open since session 47). The graph that updates the parameters must read nothing but the parameters, their
        # gradients, AdamW's own state and the rates (probes.update_inputs; session 48)
        {"ex06.optimizer.tensor_lr", "ex06.step.no_recompile", "ex06.step.other_schedules"},
    ),
    "float rates, AdamW by hand, the new parameters written into the gradients, copied in by a compiled graph": (
        {
            '"lr": torch.tensor(lr)}': '"lr": lr}',
            '"lr": torch.tensor(HEAD_LR_SCALE * lr)}': '"lr": HEAD_LR_SCALE * lr}',
            "    criterion = loss_fn()\n": (
                "    criterion, count, mine = loss_fn(), [0], {}\n"
                '    params = [p for group in optimizer.param_groups for p in group["params"]]\n'
                "    for p in params:  # AdamW's own state, kept where the grader looks, moved by junk\n"
                '        optimizer.state[p] = {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(p),\n'
                '                              "exp_avg_sq": torch.zeros_like(p)}\n'
                "\n"
                "    def _write(ps, ms):\n"
                "        for p in ps:\n"
                "            p.copy_(torch.addcmul(p.grad, p.grad, p.grad, value=0.0))\n"
                "        for m in ms:\n"
                "            m.add_(1e-12)\n"
                "\n"
                "    write_back = torch.compile(_write, backend=backend)\n"
            ),
            "        update()\n": (
                "        count[0] += 1\n"
                "        ms = []\n"
                "        with torch.no_grad():  # AdamW by hand, eager, the new parameters into the"
                " gradients\n"
                "            for group in optimizer.param_groups:\n"
                '                lr, (b1, b2) = group["lr"], group["betas"]\n'
                '                for p in group["params"]:\n'
                "                    m, v = mine.setdefault(p, (torch.zeros_like(p), torch.zeros_like(p)))\n"
                "                    m.lerp_(p.grad, 1 - b1)\n"
                "                    v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)\n"
                '                    denom = v.sqrt() / (1 - b2 ** count[0]) ** 0.5 + group["eps"]\n'
                '                    new = p * (1 - lr * group["weight_decay"])\n'
                "                    p.grad.copy_(new.addcdiv(m, denom, value=-lr / (1 - b1 ** count[0])))\n"
                '                    ms += [optimizer.state[p]["exp_avg"],'
                ' optimizer.state[p]["exp_avg_sq"]]\n'
                "            write_back(params, ms)\n"
                "        scheduler.step()\n"
            ),
        },
        # the graph read only the parameters, their gradients and AdamW's averages, which it moved by a constant:
        # took no_recompile and other_schedules (session 48, found while closing the one above). The gradients an
        # update graph is handed must be those the step's backward left (probes.backward_seen)
        {"ex06.optimizer.tensor_lr", "ex06.step.no_recompile", "ex06.step.other_schedules"},
    ),
    "float rates, the real step compiled with a backend of its own inside a custom op": (
        {
            '"lr": torch.tensor(lr)}': '"lr": lr}',
            '"lr": torch.tensor(HEAD_LR_SCALE * lr)}': '"lr": HEAD_LR_SCALE * lr}',
            "    @torch.compile(backend=backend)\n    def update() -> None:\n        optimizer.step()\n"
            "        scheduler.step()\n": (
                "    ps = list(model.parameters())\n"
                "    for p in ps:  # AdamW's state up front, so that the counted graph takes the averages as inputs\n"
                "        optimizer.state[p] = {\n"
                '            "step": torch.tensor(0.0),\n'
                '            "exp_avg": torch.zeros_like(p),\n'
                '            "exp_avg_sq": torch.zeros_like(p),\n'
                "        }\n"
                '    inner = torch.compile(optimizer.step, backend="eager")  # its recompiles are not counted\n'
                "\n"
                '    @torch.library.custom_op("mine::addc_step", mutates_args=())\n'
                "    def opaque(ps: list[torch.Tensor], ms: list[torch.Tensor]) -> torch.Tensor:\n"
                "        inner()  # runs while the counted graph runs\n"
                "        return torch.zeros(())\n"
                "\n"
                "    opaque.register_fake(lambda ps, ms: torch.empty(()))\n"
                "\n"
                "    @torch.compile(backend=backend)\n"
                "    def update(ps, ms):\n"
                "        return opaque(ps, ms)\n"
            ),
            "        update()\n": (
                "        with torch.no_grad():\n"
                '            update(ps, [optimizer.state[p][k] for p in ps for k in ("exp_avg", "exp_avg_sq")])\n'
                "        scheduler.step()\n"
            ),
        },
        # the counted graph calls one opaque op, named so that its code holds "addc", which reads every parameter and
        # average; inside, AdamW's real step recompiles for each new rate with a backend the grader does not count
        # (red team, session 47: 6 of 7 points, +4; with tensor rates 7 of 7 with nothing compiled by the grader's
        # backend). A graph that calls anything but torch's own operations no longer holds the update.
        {"ex06.optimizer.tensor_lr", "ex06.step.no_recompile", "ex06.step.other_schedules"},
    ),
}

# The edits that turn the solution into the baseline its speed checks time against (tools/speed_trials.py):
# every reference run must pass those checks and every baseline run fail them.
BASELINE: dict[str, str] = {LOOP: "    model.compile(backend=backend)\n"}

# The speed checks a wrong submission above fails by measurement, not by a wrong value: the kit's tests grade
# them for it alone, with nothing else running (`pytest -m timing`), as they grade the reference's.
MEASURED: dict[str, set[str]] = {"the whole model compiled in place": {"ex06.regional.compile_time"}}
