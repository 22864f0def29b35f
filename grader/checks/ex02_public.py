"""Exercise 2, public checks: the ones a learner runs inside the exercise notebook.

This module ships in the learner kit (``make release``): the public checks and
what they need (seeded public batches, the comparison against BrokenScorer,
the hints).  The hidden checks live in ``grader.checks.ex02``, which imports
from here and never ships.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from coursekit.ex02 import CALIBRATION_X, CALIBRATION_Y, BrokenScorer, sample_rows
from grader.checks.common import assert_close
from grader.reference.ex02 import outputs_and_grads, twin
from grader.registry import Measured, Shortfall, check

IN_FEATURES = 32
RESULT_HINT = ("Each fix must keep the computation: torch.where(peak > MAX_ACTIVATION, MAX_ACTIVATION / peak, 1.0) "
               "for the branch; (h * mask).sum(0) / mask.sum() for the mean over real rows; padding rows score 0.")


@dataclass(frozen=True)
class Case:
    """One input batch."""

    name: str
    rows: int
    seed: int
    scale: float = 1.0
    padding: float = 0.2

    def rows_on(self, device: str) -> torch.Tensor:
        return sample_rows(self.rows, IN_FEATURES, self.seed, device=device, padding=self.padding, scale=self.scale)


def public_cases(ctx) -> list[Case]:
    """Seeded batches a learner can reproduce: small, no padding, large (rescaling branch), profile size."""
    return [
        Case("small", 9, seed=0),
        Case("no padding", 64, seed=1, padding=0.0),
        Case("large activations (rescaling branch)", 64, seed=2, scale=40.0),
        Case("mostly padding", 50, seed=3, padding=0.8),
        Case("profile size", ctx.profile.batch_size, seed=4),
    ]


def _models(sub, ctx, seed: int = 0) -> tuple[nn.Module, BrokenScorer]:
    factory = sub.get("FixedScorer")
    if not (isinstance(factory, type) and issubclass(factory, BrokenScorer)):
        raise AssertionError("FixedScorer must be a subclass of BrokenScorer (class FixedScorer(BrokenScorer))")
    torch.manual_seed(seed)
    fixed = factory().to(ctx.device)
    return fixed, twin(fixed)


def _compare_cases(sub, ctx, cases: list[Case], grads: bool) -> None:
    fixed, broken = _models(sub, ctx)
    for case in cases:
        x = case.rows_on(ctx.device)
        want, want_dx, want_dp = outputs_and_grads(broken, x)
        got, got_dx, got_dp = outputs_and_grads(fixed, x)
        assert_close(got, want, torch.float32, f"FixedScorer output on case '{case.name}'", RESULT_HINT)
        if grads:
            assert_close(got_dx, want_dx, torch.float32, f"input gradient on case '{case.name}'", RESULT_HINT)
            for name, g in want_dp.items():
                if name not in got_dp:
                    raise AssertionError(f"no gradient reached {name} on case '{case.name}'")
                assert_close(got_dp[name], g, torch.float32, f"gradient of {name} on case '{case.name}'", RESULT_HINT)


@check("ex02.calibrate.opcheck", kind="structure", points=2, needs=("calibrate",), public=True)
def calibrate_opcheck(sub, ctx) -> None:
    """calibrate is a torch.library custom op that passes opcheck and matches np.interp."""
    from torch._library.custom_ops import CustomOpDef

    op = sub.get("calibrate")
    if not isinstance(op, CustomOpDef):
        raise AssertionError("calibrate must be defined with @torch.library.custom_op('ex02::calibrate', "
                             f"mutates_args=()); got {type(op).__name__}")
    top = torch.linspace(-4, 4, 33, device=ctx.device)
    got = op(top)
    want = torch.from_numpy(np.interp(top.cpu().numpy(), CALIBRATION_X, CALIBRATION_Y))
    assert_close(got, want.to(torch.float32), torch.float32, "calibrate(top)",
                 "Use np.interp(top, CALIBRATION_X, CALIBRATION_Y) and return it on top's device and dtype.")
    if got.device != top.device or got.dtype != top.dtype:
        raise AssertionError(f"calibrate returned {got.dtype} on {got.device}; expected {top.dtype} on {top.device}")
    report = torch.library.opcheck(op, (top,), raise_exception=False)
    failed = {k: v for k, v in report.items() if v != "SUCCESS"}
    if failed:
        first = next(iter(failed.values()))
        raise AssertionError(f"torch.library.opcheck failed {sorted(failed)}: {str(first).splitlines()[0]}. "
                             "Register a fake implementation with @calibrate.register_fake that returns "
                             "torch.empty_like(top).")


@check("ex02.scorer.outputs", kind="correctness", points=2, needs=("FixedScorer", "calibrate"), public=True)
def scorer_outputs(sub, ctx) -> None:
    """FixedScorer's outputs equal BrokenScorer's (same weights) on five seeded batches."""
    _compare_cases(sub, ctx, public_cases(ctx), grads=False)


def _explain(sub, ctx):
    fixed, _ = _models(sub, ctx)
    torch.compiler.reset()
    return torch._dynamo.explain(fixed)(public_cases(ctx)[4].rows_on(ctx.device))


@check("ex02.scorer.no_breaks", kind="structure", points=2, needs=("FixedScorer", "calibrate"), public=True)
def scorer_no_breaks(sub, ctx) -> Measured:
    """torch._dynamo.explain reports one graph and zero graph breaks for FixedScorer."""
    info = _explain(sub, ctx)
    if info.graph_break_count or info.graph_count != 1:
        reasons = "; ".join(str(r.reason).splitlines()[0] for r in info.break_reasons[:4])
        raise Shortfall(f"FixedScorer still has {info.graph_break_count} graph break(s) in {info.graph_count} "
                        f"graphs: {reasons or 'see TORCH_LOGS=graph_breaks'}", measured=info.graph_break_count,
                        required=0)
    return Measured(0, 0, "one graph, no breaks")
