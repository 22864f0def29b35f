"""Exercise 2's wrong submissions: edits of the solution notebook's source text, each with exactly the
checks it must fail (every other check must pass). The project's tests grade each one; instructor only, never in
the learner kit."""

from __future__ import annotations

# The solution's whole FixedScorer.forward body, which some wrong submissions replace.
FIXED_FORWARD = (
    "        h = self.encoder(x)\n"
    "        peak = h.abs().amax()\n"
    "        h = h * torch.where(peak > MAX_ACTIVATION, MAX_ACTIVATION / peak, 1.0)\n"
    "        with torch.no_grad():\n"
    "            self.mean_activation.copy_(h.mean())\n"
    "        real = (x.abs().sum(-1) > 0).unsqueeze(-1)\n"
    "        h = h - (h * real).sum(0) / real.sum()\n"
    "        scores = self.head(h)\n"
    "        confidence = calibrate(scores.detach().amax(-1))\n"
    "        return scores * confidence.unsqueeze(-1) * real\n"
)

WRONG: dict[str, tuple[dict[str, str], set[str]]] = {
    "one break left (a print)": (
        {
            "        scores = self.head(h)\n": (
                "        print(f'scoring {x.shape[0]} rows')\n        scores = self.head(h)\n"
            )
        },
        {"ex02.scorer.no_breaks", "ex02.scorer.compiles_once"},
    ),
    "a debug print in a loop inside forward": (
        {
            "        scores = self.head(h)\n": (
                "        for name in ('encoder', 'head'):\n            print('running', name)\n"
                "        scores = self.head(h)\n"
            )
        },
        # a break inside a loop: Dynamo skips forward whole and no graph is captured, which no_breaks says in
        # those words (coursekit.explain.SKIPPED) instead of "0 graph break(s) in 0 graphs"
        {"ex02.scorer.no_breaks", "ex02.scorer.compiles_once", "ex02.scorer.speed"},
    ),
    "a fix that changes results (mean over all rows)": (
        {"        h = h - (h * real).sum(0) / real.sum()": "        h = h - h.mean(0)"},
        {"ex02.scorer.outputs", "ex02.scorer.gradients", "ex02.scorer.speed"},
    ),
    "custom op without a fake implementation": (
        {
            "@calibrate.register_fake\ndef _(top: torch.Tensor) -> torch.Tensor:\n    ### BEGIN SOLUTION\n"
            "    return torch.empty_like(top)\n    ### END SOLUTION": ""
        },
        {"ex02.calibrate.opcheck", "ex02.scorer.no_breaks", "ex02.scorer.compiles_once", "ex02.scorer.speed"},
    ),
    "forward left eager (torch.compiler.disable)": (
        {
            "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n": (
                "    @torch.compiler.disable\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
            )
        },
        # every value right and no sync, but nothing compiled: the grader's compiled BrokenScorer is slower than an
        # eager FixedScorer on a CPU (1.24x against 1.25x required, red team, session 19); the timed graphs must
        # hold the scorer's linear layers
        {"ex02.scorer.no_breaks", "ex02.scorer.compiles_once", "ex02.scorer.speed"},
    ),
    "the unfixed forward, break-free only the first time Dynamo traces it": (
        {
            "class FixedScorer(BrokenScorer):": "_TRACES = [0]\n\n\nclass FixedScorer(BrokenScorer):",
            "        ### BEGIN SOLUTION\n        h = self.encoder(x)\n": (
                "        ### BEGIN SOLUTION\n"
                "        if torch.compiler.is_compiling():\n"
                "            _TRACES[0] += 1\n"
                "            if _TRACES[0] == 1:  # what the first trace (explain's) sees: no break, wrong values\n"
                "                return self.head(self.encoder(x))\n"
                "        h = self.encoder(x)\n"
            ),
            "        h = h * torch.where(peak > MAX_ACTIVATION, MAX_ACTIVATION / peak, 1.0)\n": (
                "        if peak > MAX_ACTIVATION:\n            h = h * (MAX_ACTIVATION / peak)\n"
            ),
        },
        # took no_breaks while it was counted by torch._dynamo.explain, whose output the probe threw away (red team,
        # session 40); the counted graphs' own outputs now differ from the same code's eager ones: inconsistent
        # answers, which zero the checks that got them (until session 47, the whole submission) and flag it
        {"ex02.scorer.compiles_once", "ex02.scorer.no_breaks", "ex02.scorer.no_sync"},
    ),
    "the whole forward in a torch.compiler.disable helper": (
        {
            "class FixedScorer(BrokenScorer):": (
                "@torch.compiler.disable\ndef _eager(model, x):\n    return model.fixed_forward(x)\n\n\n"
                "class FixedScorer(BrokenScorer):"
            ),
            "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n": (
                "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n        return _eager(self, x) * 1.0\n\n"
                "    def fixed_forward(self, x: torch.Tensor) -> torch.Tensor:\n"
            ),
        },
        # torch._dynamo.explain counted one graph and no break (red team, session 40): the graph held none of the
        # scorer's linear layers
        {"ex02.scorer.no_breaks", "ex02.scorer.compiles_once", "ex02.scorer.speed"},
    ),
    "the mask's nonzero() kept per input tensor": (
        {
            '        self.register_buffer("mean_activation", torch.zeros(()))\n': (
                '        self.register_buffer("mean_activation", torch.zeros(()))\n        self._seen = {}\n'
            ),
            "        h = h - (h * real).sum(0) / real.sum()\n": (
                "        key = (id(x), x.data_ptr(), x._version)\n"
                "        if key not in self._seen:  # nonzero() syncs: once per input tensor\n"
                "            self._seen[key] = (x, real.squeeze(-1).nonzero().squeeze(-1))  # x kept alive\n"
                "        h = h - h.index_select(0, self._seen[key][1]).mean(0)\n"
            ),
        },
        # synced only on the traffic probe's unwatched call, on the same tensor (red team, session 40)
        {"ex02.scorer.no_sync", "ex02.scorer.no_breaks", "ex02.scorer.compiles_once"},
    ),
    "a batch counter, its guards skipped from inside the custom op": (
        {
            ("        ### BEGIN SOLUTION\n        h = self.encoder(x)\n"): (
                "        ### BEGIN SOLUTION\n"
                "        self.stats['batches'] = self.stats.get('batches', 0) + 1\n"
                "        h = self.encoder(x)\n"
            ),
            '        self.register_buffer("mean_activation", torch.zeros(()))\n': (
                '        self.register_buffer("mean_activation", torch.zeros(()))\n'
                '        torch.compiler.set_stance("default")  # a new model warms up with guards on\n'
            ),
            "    values = np.interp(top.detach().cpu().numpy(), CALIBRATION_X, CALIBRATION_Y)\n": (
                '    torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)  # warmed '
                "up: skip guards from now on\n"
                "    values = np.interp(top.detach().cpu().numpy(), CALIBRATION_X, CALIBRATION_Y)\n"
            ),
        },
        # calibrate's body switched on set_stance(skip_guard_eval_unsafe=True): compiles_once and speed passed
        # (red team, session 39); the stance it leaves behind now fails every check whose probe calls it
        {
            "ex02.calibrate.opcheck",
            "ex02.scorer.compiles_once",
            "ex02.scorer.gradients",
            "ex02.scorer.no_breaks",
            "ex02.scorer.outputs",
            "ex02.scorer.speed",
            "ex02.scorer.statistic",
        },
    ),
    "the unfixed forward whole in a custom op (another for its backward), beside the encoder's output": (
        {
            "class FixedScorer(BrokenScorer):": (
                "import concurrent.futures\n"
                "\n"
                "from torch.func import functional_call as _fcall\n"
                "\n"
                "_TEMPLATE = BrokenScorer()\n"
                "\n"
                "\n"
                "def _broken(x, params):\n"
                "    names = [n for n, _ in _TEMPLATE.named_parameters()]\n"
                "    return _fcall(_TEMPLATE, dict(zip(names, params)), (x,))\n"
                "\n"
                "\n"
                '@torch.library.custom_op("ex02::whole", mutates_args=())\n'
                "def _whole(x: torch.Tensor, params: list[torch.Tensor]) -> torch.Tensor:\n"
                "    return _broken(x, params).clone()\n"
                "\n"
                "\n"
                "@_whole.register_fake\n"
                "def _(x, params):\n"
                "    return x.new_empty(x.shape[0], 8)\n"
                "\n"
                "\n"
                '@torch.library.custom_op("ex02::whole_bwd", mutates_args=())\n'
                "def _whole_bwd(grad: torch.Tensor, x: torch.Tensor, params: list[torch.Tensor])"
                " -> list[torch.Tensor]:\n"
                "    def grads():  # a thread of its own: autograd is off below a custom op's dispatch\n"
                "        xs = x.detach().requires_grad_()\n"
                "        ps = [p.detach().requires_grad_() for p in params]\n"
                "        return [g.clone() for g in torch.autograd.grad(_broken(xs, ps), [xs, *ps], grad)]\n"
                "\n"
                "    with concurrent.futures.ThreadPoolExecutor(1) as pool:\n"
                "        return pool.submit(grads).result()\n"
                "\n"
                "\n"
                "@_whole_bwd.register_fake\n"
                "def _(grad, x, params):\n"
                "    return [torch.empty_like(x)] + [torch.empty_like(p) for p in params]\n"
                "\n"
                "\n"
                "def _setup(ctx, inputs, output):\n"
                "    ctx.save_for_backward(inputs[0], *inputs[1])\n"
                "\n"
                "\n"
                "def _backward(ctx, grad):\n"
                "    x, *ps = ctx.saved_tensors\n"
                "    gs = _whole_bwd(grad, x, ps)\n"
                "    return gs[0], list(gs[1:])\n"
                "\n"
                "\n"
                "_AUTOGRAD = _whole.register_autograd(_backward, setup_context=_setup)\n"
                "\n"
                "\n"
                "class FixedScorer(BrokenScorer):"
            ),
            "        confidence = calibrate(scores.detach().amax(-1))\n"
            "        return scores * confidence.unsqueeze(-1) * real\n": (
                "        return _whole(x, list(self.parameters())) + 0.0 * scores\n"
            ),
        },
        # right values and gradients, one graph holding every linear layer: took no_breaks and compiles_once (red
        # team, session 47; speed fails at 0.02-0.03x). The graph's custom op ran code the graph does not show: only
        # calibrate may be called, once, on one number per row (probes.outside_torch)
        {"ex02.scorer.no_breaks", "ex02.scorer.compiles_once", "ex02.scorer.no_sync", "ex02.scorer.speed"},
    ),
    "the unfixed forward inside calibrate, handed the rows": (
        {
            '@torch.library.custom_op("ex02::calibrate"': (
                '_MODELS = []\n\n\n@torch.library.custom_op("ex02::calibrate"'
            ),
            "    values = np.interp(top.detach().cpu().numpy(), CALIBRATION_X, CALIBRATION_Y)\n": (
                "    if top.dim() == 2:  # handed the rows: the unfixed forward, eagerly, with the model's weights\n"
                "        with torch.no_grad():\n"
                "            return BrokenScorer.forward(_MODELS[-1], top).clone()\n"
                "    values = np.interp(top.detach().cpu().numpy(), CALIBRATION_X, CALIBRATION_Y)\n"
            ),
            "    return torch.empty_like(top)\n": (
                "    return torch.empty_like(top) if top.dim() == 1 else top.new_empty(top.shape[0], 8)\n"
            ),
            '        self.register_buffer("mean_activation", torch.zeros(()))\n': (
                '        self.register_buffer("mean_activation", torch.zeros(()))\n        _MODELS.append(self)\n'
            ),
            "        confidence = calibrate(scores.detach().amax(-1))\n"
            "        return scores * confidence.unsqueeze(-1) * real\n": (
                "        return calibrate(x.detach()) + 0.0 * scores\n"
            ),
        },
        # right outputs from the graph's one foreign call, the learner's own calibrate (session 48, found while
        # closing the one above): took no_breaks and compiles_once with no gradient reaching the weights
        {
            "ex02.scorer.gradients",
            "ex02.scorer.no_breaks",
            "ex02.scorer.compiles_once",
            "ex02.scorer.no_sync",
            "ex02.scorer.speed",
        },
    ),
    "the unfixed forward inside calibrate, handed a column of the rows, its answer written into a buffer": (
        {
            '@torch.library.custom_op("ex02::calibrate"': (
                '_MODELS = []\n\n\n@torch.library.custom_op("ex02::calibrate"'
            ),
            "    values = np.interp(top.detach().cpu().numpy(), CALIBRATION_X, CALIBRATION_Y)\n": (
                "    if top.dim() == 1 and top.stride(0) == 32 and top.untyped_storage().nbytes() >="
                " top.numel() * 32 * 4:\n"
                "        # handed a column of the rows: the whole rows are in its storage; the unfixed"
                " forward, eagerly\n"
                "        rows = torch.as_strided(top, (top.shape[0], 32), (32, 1), top.storage_offset())\n"
                "        model = _MODELS[-1]\n"
                "        with torch.no_grad():\n"
                "            model._scratch[: top.shape[0]].copy_(BrokenScorer.forward(model, rows))\n"
                "        return torch.ones(top.shape, device=top.device, dtype=top.dtype)\n"
                "    values = np.interp(top.detach().cpu().numpy(), CALIBRATION_X, CALIBRATION_Y)\n"
            ),
            '        self.register_buffer("mean_activation", torch.zeros(()))\n': (
                '        self.register_buffer("mean_activation", torch.zeros(()))\n'
                '        self.register_buffer("_scratch", torch.zeros(8192, 8), persistent=False)\n'
                "        _MODELS.append(self)\n"
            ),
            FIXED_FORWARD: (
                "        side = calibrate(x.detach()[:, 0])  # a column of the rows: calibrate runs"
                " BrokenScorer on them, eagerly\n"
                "        token = self.head(self.encoder(x[:1]))  # every linear layer, on one row\n"
                "        return self._scratch[: x.shape[0]] * side.unsqueeze(-1) + 0.0 * token.sum()\n"
            ),
        },
        # one graph of every linear layer (on one row) and one calibrate call on one number per row: took no_breaks
        # and compiles_once (red team, session 48). x[:, 0] is a view whose storage is the whole rows, which
        # calibrate read back with as_strided; the answer went into a buffer the graph then read. Now calibrate's
        # tensor must hold nothing else (probes.own_numbers), and forward may change nothing but mean_activation
        # (probes.watched_call)
        {
            "ex02.scorer.gradients",
            "ex02.scorer.no_breaks",
            "ex02.scorer.compiles_once",
            "ex02.scorer.speed",
            "ex02.scorer.statistic",
        },
    ),
    "the unfixed forward inside calibrate, handed the rows and a buffer as keywords": (
        {
            '@torch.library.custom_op("ex02::calibrate"': (
                'from typing import Optional\n\n_MODELS = []\n\n\n@torch.library.custom_op("ex02::calibrate"'
            ),
            "def calibrate(top: torch.Tensor) -> torch.Tensor:": (
                "def calibrate(top: torch.Tensor, rows: Optional[torch.Tensor] = None, scratch:"
                " Optional[torch.Tensor] = None) -> torch.Tensor:"
            ),
            "    values = np.interp(top.detach().cpu().numpy(), CALIBRATION_X, CALIBRATION_Y)\n": (
                "    if rows is not None:  # handed the rows and a scratch tensor as keywords: the unfixed"
                " forward, eagerly\n"
                "        with torch.no_grad():\n"
                "            scratch[: rows.shape[0]].copy_(BrokenScorer.forward(_MODELS[-1], rows))\n"
                "        return torch.ones(top.shape, device=top.device, dtype=top.dtype)\n"
                "    values = np.interp(top.detach().cpu().numpy(), CALIBRATION_X, CALIBRATION_Y)\n"
            ),
            "def _(top: torch.Tensor) -> torch.Tensor:": (
                "def _(top: torch.Tensor, rows=None, scratch=None) -> torch.Tensor:"
            ),
            '        self.register_buffer("mean_activation", torch.zeros(()))\n': (
                '        self.register_buffer("mean_activation", torch.zeros(()))\n'
                '        self.register_buffer("_scratch", torch.zeros(8192, 8), persistent=False)\n'
                "        _MODELS.append(self)\n"
            ),
            FIXED_FORWARD: (
                "        token = self.head(self.encoder(x[:1]))  # every linear layer, on one row\n"
                "        side = calibrate(token.detach().amax(-1).expand(x.shape[0]).contiguous(),"
                " rows=x.detach(), scratch=self._scratch)\n"
                "        return self._scratch[: x.shape[0]] * side.unsqueeze(-1) + 0.0 * token.sum()\n"
            ),
        },
        # calibrate's keyword arguments were not looked at (red team, session 48): every tensor it is handed counts
        {
            "ex02.scorer.gradients",
            "ex02.scorer.no_breaks",
            "ex02.scorer.compiles_once",
            "ex02.scorer.no_sync",
            "ex02.scorer.speed",
            "ex02.scorer.statistic",
        },
    ),
}

# The edits that turn the solution into the baseline its speed checks time against (tools/speed_trials.py):
# every reference run must pass those checks and every baseline run fail them.
BASELINE: dict[str, str] = {
    "class FixedScorer(BrokenScorer):": "class _Unused(BrokenScorer):",
    "@@append": "class FixedScorer(BrokenScorer):\n    pass\n",
}
