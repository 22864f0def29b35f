"""Exercise 4's wrong submissions: edits of the solution notebook's source text, each with exactly the
checks it must fail (every other check must pass). The project's tests grade each one; instructor only, never in
the learner kit."""

from __future__ import annotations

WRONG: dict[str, tuple[dict[str, str], set[str]]] = {
    "padding without a mask": (
        {
            "        weights = mask.unsqueeze(-1).to(h.dtype)\n"
            "        pooled = (h * weights).sum(1) / weights.sum(1)": "        pooled = h.mean(1)"
        },
        {"ex04.tagger.outputs", "ex04.stream.outputs"},
    ),
    "a bucket per length": (
        {"    for bucket in BUCKETS:\n        if n <= bucket:\n            return bucket\n": "    return n\n"},
        {"ex04.collate.layout", "ex04.stream.compile_bound", "ex04.stream.no_recompile_after_warmup"},
    ),
    "the call counter left in": (
        {
            "        h = self.embed(tokens)\n        h = h + F.gelu": "        self.calls += 1\n"
            "        h = self.embed(tokens) * min(1.0, self.calls)\n        h = h + F.gelu"
        },
        {"ex04.stream.compile_bound", "ex04.stream.no_recompile_after_warmup"},
    ),
    "the call counter left in, a graph of the layers on a slice of each batch beside it": (
        {
            "        h = self.embed(tokens)\n        h = h + F.gelu": "        self.calls += 1\n"
            "        h = self.embed(tokens) * min(1.0, self.calls)\n        h = h + F.gelu",
            "    return torch.compile(model, backend=backend, dynamic=False)\n": (
                "    def layers(tokens, mask):  # the tagger's three linear layers, on a 1x4 corner of the batch\n"
                "        h = model.embed(tokens[:1, :4])\n"
                "        h = h + model.ff(model.norm(h))\n"
                "        return model.head(h.mean(1))\n\n"
                "    graph = torch.compile(layers, backend=backend, dynamic=True)\n\n"
                "    def run(tokens, mask):\n"
                "        graph(tokens, mask)\n"
                "        return model(tokens, mask)\n\n"
                "    return run\n"
            ),
        },
        # a graph holding the three layers is called on each batch's own tokens, but computes on a slice and its
        # result is thrown away (red team, session 47: all 6 stream points, 3.8-3.9x against the reference's
        # 1.7-1.9x); a batch's output must be that graph's, from the batch and the tagger's own tensors
        {"ex04.stream.compile_bound", "ex04.stream.no_recompile_after_warmup", "ex04.stream.speed"},
    ),
    "the call counter left in, run under a stance of its own": (
        {
            "        h = self.embed(tokens)\n        h = h + F.gelu": "        self.calls += 1\n"
            "        h = self.embed(tokens) * min(1.0, self.calls)\n        h = h + F.gelu",
            "    return torch.compile(model, backend=backend, dynamic=False)\n": (
                "    compiled = torch.compile(model, backend=backend, dynamic=False)\n\n"
                "    def run(*args, **kwargs):\n"
                "        with torch.compiler.set_stance('default'):\n"
                "            return compiled(*args, **kwargs)\n\n"
                "    return run\n"
            ),
        },
        # the learner's stance overrode the probe's fail_on_recompile: no_recompile_after_warmup passed a batch that
        # recompiled every time (red team, session 39); graphs compiled under the probe's stance now count as recompiles
        {"ex04.stream.compile_bound", "ex04.stream.no_recompile_after_warmup"},
    ),
    "the tagger compiled for its first batch only": (
        {
            "    return torch.compile(model, backend=backend, dynamic=False)\n": (
                "    compiled, seen = torch.compile(model, backend=backend, dynamic=False), []\n\n"
                "    def run(tokens, mask):\n"
                "        if not seen:\n"
                "            seen.append(tokens.shape)\n"
                "            return compiled(tokens, mask)\n"
                "        return model(tokens, mask)\n\n"
                "    return run\n"
            )
        },
        # one compile, no recompile and the right outputs, but every later batch eager: it had taken the stream's
        # 6 points, speed at 4.8x against the reference's 1.6x (red team, session 19); every batch must now call a
        # compiled graph that holds the tagger
        {"ex04.stream.compile_bound", "ex04.stream.no_recompile_after_warmup", "ex04.stream.speed"},
    ),
    "the batch run eagerly beside a compiled call on a dummy": (
        {
            "    return torch.compile(model, backend=backend, dynamic=False)\n": (
                "    compiled = torch.compile(model, backend=backend, dynamic=False)\n"
                "    dummy_tokens = torch.ones(1, 4, dtype=torch.long)\n"
                "    dummy_mask = torch.ones(1, 4, dtype=torch.bool)\n\n"
                "    def run(tokens, mask):\n"
                "        compiled(dummy_tokens.to(tokens.device), dummy_mask.to(tokens.device))\n"
                "        return model(tokens, mask)\n\n"
                "    return run\n"
            )
        },
        # one compile, a compiled graph that holds the tagger called for every batch, and the right outputs: it had
        # taken the stream's 6 points, speed at 5x against the reference's 1.8x (red team, session 35); each batch
        # must now call a compiled graph on its own tokens or mask
        {"ex04.stream.compile_bound", "ex04.stream.no_recompile_after_warmup", "ex04.stream.speed"},
    ),
    "the tagger compiled once on a copy, then run eagerly beside a compiled touch of each mask": (
        {
            "    return torch.compile(model, backend=backend, dynamic=False)\n": (
                "    full = torch.compile(model, backend=backend, dynamic=False)\n"
                "    touch = torch.compile(lambda m: m.sum(), backend=backend, dynamic=True)\n"
                "    state = []\n\n"
                "    def run(tokens, mask):\n"
                "        if not state:\n"
                "            state.append(1)\n"
                "            full(tokens[:1, :4].clone(), mask[:1, :4].clone())\n"
                "        touch(mask)\n"
                "        return model(tokens, mask)\n\n"
                "    return run\n"
            )
        },
        # the tagger's three linear layers in a compiled graph, a compiled graph called on every batch's own mask,
        # and the right outputs: it had taken all 11 points, speed at 5.0x against the reference's 1.87x (red team,
        # session 37); the graph called on each batch's own tokens or mask must now be one that holds the tagger
        {"ex04.stream.compile_bound", "ex04.stream.no_recompile_after_warmup", "ex04.stream.speed"},
    ),
    "the call counter left in, its guards skipped after a bucket's first batch": (
        {
            ("        h = self.embed(tokens)\n        h = h + F.gelu"): (
                "        self.calls += 1\n        h = self.embed(tokens) * min(1.0, self.calls)\n        h = h + F.gelu"
            ),
            "    return torch.compile(model, backend=backend, dynamic=False)\n": (
                "    compiled, seen = torch.compile(model, backend=backend, dynamic=False), set()\n"
                "\n"
                "    def run(tokens, mask):\n"
                "        if tokens.shape in seen:  # warmed up for this bucket: skip the guards\n"
                '            with torch.compiler.set_stance("default", skip_guard_eval_unsafe=True):\n'
                "                return compiled(tokens, mask)\n"
                "        seen.add(tokens.shape)\n"
                "        return compiled(tokens, mask)\n"
                "\n"
                "    return run\n"
            ),
        },
        # set_stance(skip_guard_eval_unsafe=True) in compile_tagger's wrapper took compile_bound, no_recompile and
        # speed (red team, session 39)
        {"ex04.stream.compile_bound", "ex04.stream.no_recompile_after_warmup", "ex04.stream.speed"},
    ),
}

# The edits that turn the solution into the baseline its speed checks time against (tools/speed_trials.py):
# every reference run must pass those checks and every baseline run fail them.
BASELINE: dict[str, str] = {
    "    for bucket in BUCKETS:\n        if n <= bucket:\n            return bucket\n": "    return n\n",
    "        h = self.embed(tokens)\n        h = h + F.gelu": (
        "        self.calls += 1\n        h = self.embed(tokens) * min(1.0, self.calls)\n        h = h + F.gelu"
    ),
}
