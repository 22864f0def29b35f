"""Exercise 3's wrong submissions: edits of the solution notebook's source text, each with exactly the
checks it must fail (every other check must pass). The project's tests grade each one; instructor only, never in
the learner kit."""

from __future__ import annotations

WRONG: dict[str, tuple[dict[str, str], set[str]]] = {
    "teacher receives gradients": (
        {
            "        self.teacher = teacher.eval().requires_grad_(False)": "        self.teacher = teacher.eval()",
            "        with torch.no_grad():\n            teacher_logits = self.teacher(images)": (
                "        teacher_logits = self.teacher(images)"
            ),
        },
        {"ex03.distiller.gradients", "ex03.step.training"},
    ),
    "the T**2 factor left out": (
        {"return self.alpha * temp * temp * soft": "return self.alpha * soft"},
        # Distiller itself is right: its check compares it with the learner's own DistillLoss (the formula's
        # reference does not ship in the kit), so a loss bug costs the loss checks, not Distiller's too
        {"ex03.loss.values", "ex03.loss.temperature", "ex03.loss.bf16", "ex03.step.training"},
    ),
    "teacher under inference_mode": (
        {
            "        with torch.no_grad():\n            teacher_logits": "        with torch.inference_mode():\n"
            "            teacher_logits"
        },
        # eager, the teacher's inference tensors only feed new tensors: the eager checks pass
        {"ex03.step.training", "ex03.step.no_graph_breaks", "ex03.step.no_recompile", "ex03.step.speed"},
    ),
    "the Distiller compiled for the warm-up steps only, AdamW fused": (
        {
            "    compiled = torch.compile(distiller, backend=backend, fullgraph=True)\n": (
                "    compiled = torch.compile(distiller, backend=backend, fullgraph=True)\n"
                "    for group in optimizer.param_groups:\n"
                "        group['fused'], group['foreach'] = True, False\n"
                "    calls = []\n"
            ),
            "        loss = compiled(images, labels)\n": (
                "        calls.append(1)\n        loss = (compiled if len(calls) <= 2 else distiller)(images, labels)\n"
            ),
        },
        # the two steps the probe compiles with ran compiled, the timed ones eagerly with a fused optimizer: 1.10x
        # against 1.05x before the timed steps' compiled work was counted (red team, session 37); no_recompile sees
        # the eager steps after warm-up since session 39
        {"ex03.step.no_recompile", "ex03.step.speed"},
    ),
    "the Distiller left eager (nothing compiled)": (
        {"    compiled = torch.compile(distiller, backend=backend, fullgraph=True)": "    compiled = distiller"},
        # no_recompile passed it (nothing compiled, nothing recompiled; red team, session 39): it now requires a
        # compiled step and every step after warm-up to run the compiled graph
        {"ex03.step.no_graph_breaks", "ex03.step.no_recompile", "ex03.step.speed"},
    ),
    "a per-call recompile run under eager_on_recompile": (
        {
            "        student_logits = self.student(images)\n": (
                "        self.calls = getattr(self, 'calls', 0) + 1\n        student_logits = self.student(images)\n"
            ),
            "        loss = compiled(images, labels)\n": (
                "        with torch.compiler.set_stance('eager_on_recompile'):\n"
                "            loss = compiled(images, labels)\n"
            ),
        },
        # each step's recompile fell back to eager under the learner's own stance (red team, session 39)
        {"ex03.step.no_graph_breaks", "ex03.step.no_recompile", "ex03.step.speed"},
    ),
    "TF32 / bfloat16 matmuls switched on in make_train_step": (
        {
            "    compiled = torch.compile(distiller, backend=backend, fullgraph=True)\n": (
                "    torch.set_float32_matmul_precision('high')\n"
                "    compiled = torch.compile(distiller, backend=backend, fullgraph=True)\n"
            ),
        },
        # on a GPU, TF32 would speed up the step's matmuls beside the grader's float32 baseline; on the CPU, 'medium'
        # passed every value check (session 39): the worker sets the switches back and fails the probe that moved them
        {"ex03.step.training", "ex03.step.no_graph_breaks", "ex03.step.no_recompile", "ex03.step.speed"},
    ),
    "KL averaged over the classes too (reduction='mean')": (
        {'            reduction="batchmean",': '            reduction="mean",'},
        # the timed step trains in lockstep with the grader's, so a step that computes another loss fails its speed
        {"ex03.loss.values", "ex03.loss.temperature", "ex03.loss.bf16", "ex03.step.training", "ex03.step.speed"},
    ),
    "extract_student returns an untrained copy": (
        {
            "        self.student = student\n": (
                "        self.student = student\n"
                "        object.__setattr__(self, 'untrained', __import__('copy').deepcopy(student))\n"
            ),
            "    return unwrap(unwrap(model).student)\n": "    return unwrap(model).untrained\n",
        },
        # the trained weights are as far from the copy's as training moved them: step.training's weight test
        {"ex03.extract.student", "ex03.step.training"},
    ),
    "an untrained copy with a nan in every weight": (
        {
            "    return unwrap(unwrap(model).student)\n": (
                "    stale = __import__('copy').deepcopy(unwrap(unwrap(model).student))\n"
                "    with torch.no_grad():\n"
                "        for t in stale.state_dict().values():\n"
                "            if t.is_floating_point():\n"
                "                t.normal_(0, 0.02).view(-1)[0] = float('nan')\n"
                "    return stale\n"
            ),
        },
        # red team, session 33: "max difference > tolerance" is false for nan, and this copy had passed as trained
        {"ex03.extract.student", "ex03.step.training"},
    ),
    "the lesson's one-level unwrap": (
        {"    return unwrap(unwrap(model).student)\n": '    return getattr(model, "_orig_mod", model).student\n'},
        # right for a compiled Distiller, but a compiled student comes back as an OptimizedModule
        {"ex03.extract.student"},
    ),
    "only the student compiled": (
        {
            "    compiled = torch.compile(distiller, backend=backend, fullgraph=True)": (
                "    distiller.student = torch.compile(distiller.student, backend=backend, fullgraph=True)"
            ),
            "        loss = compiled(images, labels)": "        loss = distiller(images, labels)",
        },
        # one frame, so it had passed as "one graph for student + teacher + loss" (red team, session 19): the graph
        # must call the teacher's linear layers too, and so must the timed step's
        {"ex03.step.no_graph_breaks", "ex03.step.speed"},
    ),
    "a call counter, its guards skipped after warm-up": (
        {
            "        self.loss = loss\n": ("        self.loss = loss\n        self.stats = {}\n"),
            "        student_logits = self.student(images)\n": (
                "        self.stats['calls'] = self.stats.get('calls', 0) + 1\n"
                "        student_logits = self.student(images)\n"
            ),
            "        loss = compiled(images, labels)\n": (
                "        if warm:  # warmed up: skip the guards\n"
                '            with torch.compiler.set_stance("default", skip_guard_eval_unsafe=True):\n'
                "                loss = compiled(images, labels)\n"
                "        else:\n"
                "            warm.append(1)\n"
                "            loss = compiled(images, labels)\n"
            ),
            "    compiled = torch.compile(distiller, backend=backend, fullgraph=True)\n": (
                "    compiled, warm = torch.compile(distiller, backend=backend, fullgraph=True), []\n"
            ),
        },
        # set_stance(skip_guard_eval_unsafe=True) around the compiled call after the first step took 8 of 8 step
        # points (red team, session 39)
        {"ex03.step.no_graph_breaks", "ex03.step.no_recompile", "ex03.step.speed"},
    ),
    "the Distiller eager beside a compiled shadow of itself on one image, under no_grad": (
        {
            "    compiled = torch.compile(distiller, backend=backend, fullgraph=True)\n": (
                "    shadow = torch.compile(distiller, backend=backend, fullgraph=True)\n"
                "    compiled = distiller  # eager: the compiled shadow runs on one image beside it\n"
            ),
            "        loss = compiled(images, labels)\n": (
                "        with torch.no_grad():\n            shadow(images[:1], labels[:1])\n"
                "        loss = compiled(images, labels)\n"
            ),
        },
        # one graph holding every linear layer, run in every step, no recompile: took no_graph_breaks and
        # no_recompile (red team, session 47; speed 0.85-1.00x against 1.05x, left unjudged). Each step's loss must
        # now be an output of the compiled Distiller, run with gradients, a backward through it
        # (GraphRuns.answer_made)
        {"ex03.step.no_graph_breaks", "ex03.step.no_recompile"},
    ),
    "the compiled Distiller's loss returned, the backward run on an eager one": (
        {"        loss.backward()\n": "        distiller(images, labels).backward()\n"},
        # the returned loss is the graph's, on the whole batch; the gradients are an eager Distiller's (session 48)
        {"ex03.step.no_graph_breaks", "ex03.step.no_recompile"},
    ),
    "training eager, a compiled graph on one image returning a slot the eager step filled": (
        {
            "    compiled = torch.compile(distiller, backend=backend, fullgraph=True)\n": (
                "    distiller._slot = torch.zeros((), device=next(distiller.parameters()).device)\n"
                "\n"
                "    def shadow(images, labels):\n"
                "        return distiller._slot + 0.0 * distiller(images[:1], labels[:1])\n"
                "\n"
                "    compiled = torch.compile(shadow, backend=backend, fullgraph=True)\n"
            ),
            ("        loss = compiled(images, labels)\n        loss.backward()\n"): (
                "        loss = distiller(images, labels)\n"
                "        loss.backward()\n"
                "        distiller._slot.copy_(loss.detach())\n"
                "        compiled(images, labels).backward()\n"
            ),
        },
        # the loss returned was the graph's output, equal to the eager loss the step had copied into a tensor it
        # attached to the Distiller, the graph ran every linear layer (on one image) and a backward of zeros: took
        # no_graph_breaks and no_recompile (red team, session 48). The graph must run every linear layer on the
        # whole batch (probes.on_rows), and the Distiller's tensors are those it had before make_train_step
        {"ex03.step.no_graph_breaks", "ex03.step.no_recompile"},
    ),
}

# The edits that turn the solution into the baseline its speed checks time against (tools/speed_trials.py):
# every reference run must pass those checks and every baseline run fail them.
BASELINE: dict[str, str] = {
    "    compiled = torch.compile(distiller, backend=backend, fullgraph=True)": "    compiled = distiller"
}
