"""Exercise 2, hidden checks: remove every graph break from BrokenScorer.

The public checks and the helpers they share live in ``grader.checks.ex02_public``
(which ships to learners); this module adds the hidden ones and never ships.
"""

from __future__ import annotations

import random

import torch

from coursekit.ex02 import sample_rows
from coursekit.timing import compare
from coursekit.traffic import watch_traffic
from grader.checks.common import assert_close
from grader.checks.ex02_public import IN_FEATURES, RESULT_HINT, Case, _compare_cases, _models, public_cases
from grader.registry import Measured, Shortfall, check, in_report_order


def hidden_cases(ctx) -> list[Case]:
    """Batches the learner never sees."""
    rng = random.Random(ctx.secret_seed)
    return [Case("secret seed", rng.randint(2, 400), seed=ctx.secret_seed, scale=rng.choice([0.5, 1.0, 25.0]),
                 padding=rng.choice([0.0, 0.3]))]


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


def torch_calibrate(device: str, dtype: torch.dtype = torch.float32):
    """A pure-torch twin of ``calibrate`` (np.interp semantics) with its constants built up front.

    The traffic check swaps it in for the learner's op, so the op's own host
    round trip (its known price) is not counted against the learner's forward.
    """
    from coursekit.ex02 import CALIBRATION_X, CALIBRATION_Y

    xp = torch.tensor(CALIBRATION_X, dtype=dtype, device=device)
    fp = torch.tensor(CALIBRATION_Y, dtype=dtype, device=device)

    def calibrate(top: torch.Tensor) -> torch.Tensor:
        i = torch.searchsorted(xp, top.detach().contiguous()).clamp(1, len(xp) - 1)
        t = ((top.detach() - xp[i - 1]) / (xp[i] - xp[i - 1])).clamp(0, 1)
        return fp[i - 1] + t * (fp[i] - fp[i - 1])

    return calibrate


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


# Report rows follow the notebook, public and hidden checks interleaved as the tasks come.
ORDER = ("ex02.calibrate.opcheck", "ex02.scorer.outputs", "ex02.scorer.gradients", "ex02.scorer.statistic",
         "ex02.scorer.no_breaks", "ex02.scorer.compiles_once", "ex02.scorer.no_sync", "ex02.scorer.speed")


in_report_order(ORDER)
