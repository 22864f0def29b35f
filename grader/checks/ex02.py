"""Exercise 2: remove every graph break from BrokenScorer."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from coursekit.ex02 import CALIBRATION_X, CALIBRATION_Y, BrokenScorer, sample_rows
from coursekit.timing import compare
from coursekit.traffic import watch_traffic
from grader.checks.common import assert_close
from grader.reference.ex02 import outputs_and_grads, torch_calibrate, twin
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


def hidden_cases(ctx) -> list[Case]:
    """Batches the learner never sees."""
    rng = random.Random(ctx.secret_seed)
    return [Case("secret seed", rng.randint(2, 400), seed=ctx.secret_seed, scale=rng.choice([0.5, 1.0, 25.0]),
                 padding=rng.choice([0.0, 0.3]))]


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


@check("ex02.scorer.gradients", kind="correctness", points=2, needs=("FixedScorer", "calibrate"))
def scorer_gradients(sub, ctx) -> None:
    """Outputs, input gradients and parameter gradients match on all batches, a secret one included."""
    _compare_cases(sub, ctx, public_cases(ctx) + hidden_cases(ctx), grads=True)


@check("ex02.scorer.statistic", kind="correctness", points=1, needs=("FixedScorer", "calibrate"))
def scorer_statistic(sub, ctx) -> None:
    """FixedScorer keeps the mean activation as a tensor buffer `mean_activation`, updated by forward."""
    fixed, broken = _models(sub, ctx)
    stat = getattr(fixed, "mean_activation", None)
    if not isinstance(stat, torch.Tensor) or "mean_activation" not in dict(fixed.named_buffers()):
        raise AssertionError("FixedScorer needs a buffer: self.register_buffer('mean_activation', torch.zeros(()))")
    for case in public_cases(ctx)[1:3]:
        x = case.rows_on(ctx.device)
        fixed(x)
        broken(x)
        assert_close(fixed.mean_activation.reshape(()), torch.tensor(broken.stats["mean_activation"]),
                     torch.float32, f"mean_activation after case '{case.name}'",
                     "Update it in forward with self.mean_activation.copy_(h.mean()) under torch.no_grad().")


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


@check("ex02.scorer.compiles_once", kind="structure", points=2, needs=("FixedScorer", "calibrate"))
def scorer_compiles_once(sub, ctx) -> Measured:
    """torch.compile(fullgraph=True) compiles FixedScorer exactly once for three batches, forward and backward."""
    from torch._dynamo.testing import CompileCounterWithBackend

    fixed, _ = _models(sub, ctx)
    torch.compiler.reset()
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(fixed, backend=counter, fullgraph=True)
    rows = public_cases(ctx)[4].rows
    for seed in range(3):
        compiled(sample_rows(rows, IN_FEATURES, 50 + seed, device=ctx.device)).sum().backward()
    if counter.frame_count != 1:
        raise Shortfall(f"three batches of the same shape compiled {counter.frame_count} times; expected once "
                        "(TORCH_LOGS=recompiles says why)", measured=counter.frame_count, required=1)
    return Measured(1, 1, "compiled once with fullgraph=True")


@check("ex02.scorer.no_sync", kind="structure", points=1, needs=("FixedScorer", "calibrate"))
def scorer_no_sync(sub, ctx) -> Measured:
    """FixedScorer's forward reads nothing back to the host outside the calibrate op."""
    fixed, _ = _models(sub, ctx)
    sub.get("calibrate")
    op_name = "calibrate"
    x = public_cases(ctx)[4].rows_on(ctx.device)
    learner_op = sub.namespace["calibrate"]
    sub.namespace["calibrate"] = torch_calibrate(ctx.device)  # the op's own host round trip is its known price
    try:
        fixed(x)
        with watch_traffic(ctx.device) as traffic:
            fixed(x)
    finally:
        sub.namespace["calibrate"] = learner_op
    if traffic.sync_count or traffic.host_tensor_count:
        raise Shortfall(f"FixedScorer.forward moves data between host and device outside {op_name}: "
                        f"{traffic.summary()}. No .item(), no boolean-mask indexing, no tensors from Python data.",
                        measured=traffic.sync_count + traffic.host_tensor_count, required=0)
    return Measured(0, 0, f"no syncs outside {op_name}")


@check("ex02.scorer.speed", kind="speed", points=2, needs=("FixedScorer", "calibrate"))
def scorer_speed(sub, ctx) -> Measured:
    """Compiled FixedScorer (forward + backward) beats the grader's compiled BrokenScorer by the device's threshold."""
    p = ctx.profile
    fixed, broken = _models(sub, ctx)
    torch.compiler.reset()
    compiled_fixed, compiled_broken = torch.compile(fixed), torch.compile(broken)

    def fwd_bwd(model):
        def run(x):
            out = model(x)
            out.square().sum().backward()
            return out
        return run

    def make_args(i: int):
        return (sample_rows(p.batch_size, IN_FEATURES, ctx.secret_seed + 31 * (i + 3), device=ctx.device),)

    def verify(out, args) -> None:
        assert_close(out, broken(args[0]), torch.float32, "FixedScorer output during timing", RESULT_HINT)

    result = compare(fwd_bwd(compiled_broken), fwd_bwd(compiled_fixed), make_args, device=ctx.device,
                     trials=p.trials, warmup=max(2, p.warmup), min_sample_s=p.min_sample_s, check=verify)
    required = ctx.required_speedup("ex02.scorer.speed")
    detail = (f"{result.speedup:.2f}x the grader's compiled BrokenScorer (median of {result.trials} interleaved "
              f"trials, IQR {result.speedup_q1:.2f}-{result.speedup_q3:.2f})")
    if result.speedup < required:
        raise Shortfall(f"compiled FixedScorer is too slow: {detail}; required {required:.2f}x. Remaining breaks "
                        "or host syncs are the usual cause.", measured=result.speedup, required=required)
    return Measured(result.speedup, required, detail, timed_s=result.timed_s)
