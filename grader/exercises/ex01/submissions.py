"""Exercise 1's wrong submissions: edits of the solution notebook's source text, each with exactly the
checks it must fail (every other check must pass). The project's tests grade each one; instructor only, never in
the learner kit."""

from __future__ import annotations

# `make test` grades this exercise's first-listed wrong submissions only on the checks they must fail, and
# `make test-compat` on the rest (tests/test_grader.py): the checks "assert in the loss" must pass cost it 18.6 s of
# its 19 s (graded whole; split, 1.1 s on the pinned torch, session 23's fresh clone). Exercises 2-5 grade whole:
# there the checks share the submission's compiles, and a second grading costs more than it saves
SPLIT_GRADING = True
WRONG: dict[str, tuple[dict[str, str], set[str]]] = {
    "the warm-up call profiled too": (
        {
            "    fn(*args)  # warm-up: first calls pay one-off costs\n"
            "    with profile(activities=activities) as prof:\n": (
                "    with profile(activities=activities) as prof:\n        fn(*args)\n"
            )
        },
        # every count doubled
        {"ex01.profile.op_counts", "ex01.profile.hidden"},
    ),
    "counts written from the function's arguments": (
        {
            "    activities = [ProfilerActivity.CPU]": (
                "    x, reads, columns = args\n"
                "    return {'aten::item': reads, 'aten::_local_scalar_dense': reads, 'aten::exp': columns,"
                " 'aten::select': 2 * reads + columns}\n"
                "    activities = [ProfilerActivity.CPU]"
            )
        },
        # the public formula, no profiler: the hidden check compares every operator with the grader's profile
        {"ex01.profile.hidden"},
    ),
    "operators named without their namespace": (
        {
            '    return {event.key: event.count for event in prof.key_averages() if event.key.startswith("aten::")}': (
                '    return {event.key.removeprefix("aten::"): event.count for event in prof.key_averages()}'
            )
        },
        {"ex01.profile.op_counts", "ex01.profile.hidden"},
    ),
    "no warm-up call": (
        {"    fn(*args)  # warm-up: first calls pay one-off costs\n": ""},
        # the grader's function has a one-off cost on its first call: one exp and one select too many
        {"ex01.profile.op_counts", "ex01.profile.hidden"},
    ),
    "the naive loss as the built-in": (
        {
            "    return nn.CrossEntropyLoss(\n"
            "        weight=torch.tensor(class_weights, dtype=torch.float32), ignore_index=ignore_index, "
            "label_smoothing=smoothing\n"
            "    )\n": "    return NaiveSmoothedCE(class_weights, smoothing, ignore_index)\n"
        },
        # the right values on the public cases, but not PyTorch's own module (red team, session 19)
        {"ex01.builtin.values"},
    ),
    "compile_loss returns the loss uncompiled": (
        {"    return torch.compile(loss, backend=backend, fullgraph=True)": "    return loss"},
        # the eager hand-written loss alone beats the naive one 11x: the timed graphs must hold the loss's operators
        {"ex01.compiled.single_graph", "ex01.compiled.speed"},
    ),
    "compile_loss: a token graph beside the eager loss": (
        {
            "    return torch.compile(loss, backend=backend, fullgraph=True)": (
                "    token = torch.compile(lambda z: z.exp(), backend=backend, fullgraph=True)\n\n"
                "    def run(logits, target):\n"
                "        token(logits.detach()[:1, :1])  # a graph that holds exp, on a corner of the logits\n"
                "        return loss(logits, target)\n\n"
                "    return run"
            )
        },
        # a graph holding a loss operator ran on every call, but the loss returned is the eager one (red team,
        # session 47: both checks, speed at 9.0-9.5x against 5x); the loss must be that graph's output
        {"ex01.compiled.single_graph", "ex01.compiled.speed"},
    ),
    "compile_loss compiled for its first call only": (
        {
            "    return torch.compile(loss, backend=backend, fullgraph=True)": (
                "    compiled, calls = torch.compile(loss, backend=backend, fullgraph=True), []\n\n"
                "    def run(logits, target):\n"
                "        calls.append(1)\n"
                "        return (compiled if len(calls) == 1 else loss)(logits, target)\n\n"
                "    return run"
            )
        },
        # the staging call compiled, the timed calls eager: 10.5x against 5x before the timed calls' compiled work
        # was counted (red team, session 37); single_graph sees the eager calls too since session 39
        {"ex01.compiled.single_graph", "ex01.compiled.speed"},
    ),
    "the whole batch at once": (
        {
            "    total = torch.zeros((), device=images.device)\n"
            "    for x, y in zip(images.chunk(micro_batches), labels.chunk(micro_batches)):\n"
            "        loss = loss_fn(model(x), y) / micro_batches\n"
            "        loss.backward()\n"
            "        total += loss.detach()\n": (
                "    total = loss_fn(model(images), labels)\n    total.backward()\n    total = total.detach()\n"
            )
        },
        # equal to accumulating for a plain mean loss; the judge's step uses a class-weighted one (session 19)
        {"ex01.train_step.update"},
    ),
    "sync in the step": (
        {
            "    optimizer.step()\n    return total": (
                "    optimizer.step()\n"
                "    if not torch.isfinite(total):\n"
                "        raise FloatingPointError('loss diverged')\n"
                "    return total"
            )
        },
        {"ex01.train_step.no_sync"},
    ),
    "clipping decided on the host": (
        {
            "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)": (
                "    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float('inf'))\n"
                "    if norm > max_norm:\n"
                "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)"
            )
        },
        {"ex01.train_step.no_sync"},
    ),
    "no clipping": (
        {"    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n": ""},
        {"ex01.train_step.update"},
    ),
    "micro-batch losses not divided": (
        {"        loss = loss_fn(model(x), y) / micro_batches\n": "        loss = loss_fn(model(x), y)\n"},
        {"ex01.train_step.update"},
    ),
    "assert in the loss": (
        {
            "        logp = torch.log_softmax(logits, dim=-1)\n": (
                "        assert target.max() < logits.shape[-1]\n        logp = torch.log_softmax(logits, dim=-1)\n"
            )
        },
        # torch.compile turns an assert on a tensor into an async device-side assert: no graph break
        {"ex01.smoothed_ce.no_host_traffic"},
    ),
    "a debug print in a loop inside the loss": (
        {
            "        return ((1 - eps) * nll + eps / num_classes * smooth) / target_weight.sum()\n": (
                "        for part in ('nll', 'smooth'):\n"
                "            print('computed', part)\n"
                "        return ((1 - eps) * nll + eps / num_classes * smooth) / target_weight.sum()\n"
            )
        },
        # fullgraph=True refuses the print, and the message names the learner's line and Dynamo's explanation
        # (grader.probing.where_in_notebook reads Dynamo's "from user code:"); a plain compile would skip the whole
        # loss for the break inside a loop, which coursekit.explain reports as such (SKIPPED)
        {"ex01.compiled.values", "ex01.compiled.single_graph", "ex01.compiled.speed"},
    ),
    "a mask cached per target object": (
        {
            "        keep = target != self.ignore_index\n": (
                "        if torch.compiler.is_compiling():\n"
                "            keep = target != self.ignore_index\n"
                "        else:  # eager: a new batch builds its mask once\n"
                "            if target is not getattr(self, '_target', None):\n"
                "                self._keep = torch.tensor([t != self.ignore_index for t in target.tolist()],"
                " device=logits.device)\n"
                "                self._target = target\n"
                "            keep = self._keep\n"
            )
        },
        # a training loop pays .tolist() and a host-built tensor every step: the watched call gets a new target
        # (red team, session 19; compiled, it keeps the plain mask, so only the eager traffic check can see it)
        {"ex01.smoothed_ce.no_host_traffic"},
    ),
    "wrong reduction (mean over rows)": (
        {"/ target_weight.sum()": "/ keep.sum()"},
        {
            "ex01.smoothed_ce.values",
            "ex01.smoothed_ce.gradients",
            "ex01.compiled.values",
            "ex01.smoothed_ce.speed",
            "ex01.compiled.speed",
        },
    ),
    "unstable log-softmax": (
        {"logp = torch.log_softmax(logits, dim=-1)": "logp = logits - logits.exp().sum(-1, keepdim=True).log()"},
        {"ex01.smoothed_ce.gradients", "ex01.compiled.values"},
    ),
    "weights rebuilt every call": (
        {
            '        self.register_buffer("weight", torch.tensor(class_weights, dtype=torch.float32))': (
                "        self.class_weights = list(class_weights)"
            ),
            "        weight = self.weight.to(logp.dtype)": (
                "        weight = torch.tensor(self.class_weights, dtype=logp.dtype, device=logits.device)"
            ),
        },
        # compiled, the Python list becomes a constant of the graph: only the eager rung pays
        {"ex01.smoothed_ce.no_host_traffic"},
    ),
    "the loss's guards skipped after its first call (a call counter left in)": (
        {
            "        self.ignore_index = ignore_index\n": (
                "        self.ignore_index = ignore_index\n        self.stats = {}\n"
            ),
            "        logp = torch.log_softmax(logits, dim=-1)\n": (
                "        self.stats['calls'] = self.stats.get('calls', 0) + 1\n"
                "        logp = torch.log_softmax(logits, dim=-1)\n"
            ),
            "    return torch.compile(loss, backend=backend, fullgraph=True)": (
                "    compiled, warm = torch.compile(loss, backend=backend, fullgraph=True), []\n"
                "\n"
                "    def run(logits, target):\n"
                "        if not warm:  # the first call compiles\n"
                "            warm.append(1)\n"
                "            return compiled(logits, target)\n"
                '        with torch.compiler.set_stance("default", skip_guard_eval_unsafe=True):\n'
                "            return compiled(logits, target)\n"
                "\n"
                "    return run"
            ),
        },
        # set_stance('default', skip_guard_eval_unsafe=True) reused one stale graph: single_graph and speed passed
        # (red team, session 39)
        {"ex01.compiled.single_graph", "ex01.compiled.speed"},
    ),
    "a call counter under recompile_limit=1": (
        {
            "        logp = torch.log_softmax(logits, dim=-1)\n": (
                "        self.calls = getattr(self, 'calls', 0) + 1\n        logp = torch.log_softmax(logits, dim=-1)\n"
            ),
            "    return torch.compile(loss, backend=backend, fullgraph=True)": (
                "    compiled = torch.compile(loss, backend=backend)\n\n"
                "    def run(logits, target):\n"
                "        with torch._dynamo.config.patch(recompile_limit=1):\n"
                "            return compiled(logits, target)\n\n"
                "    return run"
            ),
        },
        # past the limit Dynamo ran the loss eagerly and the frame count stayed 1: single_graph passed (red team,
        # session 39)
        {"ex01.compiled.single_graph", "ex01.compiled.speed"},
    ),
}

# The edits that turn the solution into the baseline its speed checks time against (tools/speed_trials.py):
# every reference run must pass those checks and every baseline run fail them.
BASELINE: dict[str, str] = {
    "class SmoothedCE(nn.Module):": "class _Unused(nn.Module):",
    "    return torch.compile(loss, backend=backend, fullgraph=True)": "    return loss",
    "@@append": "class SmoothedCE(NaiveSmoothedCE):\n    pass\n",
}
