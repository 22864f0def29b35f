"""Exercise 2, public checks (ship in the learner kit): the custom op, FixedScorer's outputs, no graph breaks.

FixedScorer is compared with the given BrokenScorer run eagerly with the same weights: the given code is the
reference here, so nothing of the solution ships. The hidden checks live in ``hidden.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from coursekit.lessons.graph_breaks.givens import CALIBRATION_X, CALIBRATION_Y, BrokenScorer, sample_rows
from grader.exercises.ex02.probes import ALIAS_HINT, FAKE_HINT
from grader.judging import assert_answers_consistent, assert_close, linear_layers
from grader.probing import without_paths
from grader.registry import Measured, Shortfall, check

IN_FEATURES = 32
RESULT_HINT = (
    "Each fix must keep the computation: torch.where(peak > MAX_ACTIVATION, MAX_ACTIVATION / peak, 1.0) "
    "for the branch; (h * mask).sum(0) / mask.sum() for the mean over real rows; padding rows score 0."
)


@dataclass(frozen=True)
class Case:
    """One input batch."""

    name: str
    rows: int
    seed: int
    scale: float = 1.0
    padding: float = 0.2

    def rows_on(self, device: str = "cpu") -> torch.Tensor:
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


def broken(seed: int = 0) -> BrokenScorer:
    """The given model with seeded weights: its weights go to the learner's FixedScorer, its outputs are the
    reference."""
    torch.manual_seed(seed)
    return BrokenScorer()


def weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {f"w.{k}": v.detach().clone() for k, v in model.state_dict().items()}


def outputs_and_grads(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Output, gradient w.r.t. the input, and parameter gradients of ``model(x).square().sum()``."""
    x = x.detach().clone().requires_grad_()
    model.zero_grad(set_to_none=True)
    out = model(x)
    out.square().sum().backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.detach(), x.grad.detach(), grads


CALIBRATE_HINT = (
    "With a correct calibrate in its place (the grader's own pure-torch np.interp(top, CALIBRATION_X, "
    "CALIBRATION_Y)), FixedScorer's outputs match: FixedScorer is right and calibrate is what to fix "
    "(ex02.calibrate.opcheck checks it on its own)."
)


def expect_cases(learner, cases: list[Case], grads: bool) -> None:
    """FixedScorer with BrokenScorer's weights matches BrokenScorer on every case (and its gradients). Where it
    does not, but does with a correct ``calibrate`` put in its place, the message says calibrate is the culprit."""
    model = broken()
    xs = [c.rows_on() for c in cases]
    tensors = {**weights(model), **{f"x{i}": x for i, x in enumerate(xs)}}
    got = learner.ask("ex02.scorer", {"batches": len(cases), "grads": grads}, tensors)
    try:
        compare_cases(got, model, cases, xs, grads)
    except AssertionError as exc:
        try:
            twin = learner.ask("ex02.scorer", {"batches": len(cases), "grads": grads, "twin": True}, tensors)
            compare_cases(twin, model, cases, xs, grads)
        except Exception:  # noqa: BLE001 - FixedScorer is wrong with a correct calibrate too: the first message
            raise exc from None
        raise AssertionError(str(exc).replace(RESULT_HINT, "").rstrip() + f" {CALIBRATE_HINT}") from None


def compare_cases(got, model: nn.Module, cases: list[Case], xs: list[torch.Tensor], grads: bool) -> None:
    """``AssertionError`` where the learner's replies differ from ``model``'s outputs (and gradients)."""
    for i, (case, x) in enumerate(zip(cases, xs)):
        want, want_dx, want_dp = outputs_and_grads(model, x)
        assert_close(
            got.tensor(f"out{i}"), want, torch.float32, f"FixedScorer output on case '{case.name}'", RESULT_HINT
        )
        if grads:
            assert_close(
                got.tensor(f"dx{i}"), want_dx, torch.float32, f"input gradient on case '{case.name}'", RESULT_HINT
            )
            for name, g in want_dp.items():
                if f"{i}.dp.{name}" not in got.tensors:
                    raise AssertionError(f"no gradient reached {name} on case '{case.name}'")
                assert_close(
                    got.tensor(f"{i}.dp.{name}"),
                    g,
                    torch.float32,
                    f"gradient of {name} on case '{case.name}'",
                    RESULT_HINT,
                )


@check("ex02.calibrate.opcheck", kind="structure", points=2, needs=("calibrate",), public=True)
def calibrate_opcheck(learner, ctx) -> None:
    """calibrate is a torch.library custom op that passes opcheck and matches np.interp."""
    top = torch.linspace(-4, 4, 33)
    got = learner.ask("ex02.calibrate", {}, {"top": top})
    want = torch.from_numpy(np.interp(top.numpy(), CALIBRATION_X, CALIBRATION_Y)).to(torch.float32)
    assert_close(
        got.tensor("out"),
        want,
        torch.float32,
        "calibrate(top)",
        "Use np.interp(top, CALIBRATION_X, CALIBRATION_Y) and return it on top's device and dtype.",
    )
    device, dtype = got.text("device", limit=40), got.text("dtype", limit=40)
    if dtype != "torch.float32" or device.split(":")[0] != torch.device(ctx.device).type:
        raise AssertionError(f"calibrate returned {dtype} on {device}; expected torch.float32 on {ctx.device}")
    failed = got.value("opcheck_failed", dict)
    if failed:
        raise AssertionError(f"torch.library.opcheck failed {sorted(str(k) for k in failed)}: {opcheck_gist(failed)}")


def opcheck_gist(failed: dict) -> str:
    """What opcheck's first failure says, without the grading machine's paths, and the hint for its cause: a missing
    fake implementation, an output that aliases an input, or neither."""
    first = str(next(iter(failed.values())))
    said = without_paths(first)[:300]
    if "no fake impl" in first:
        return f"{said} {FAKE_HINT}"
    if "alias" in first:
        return f"{said} {ALIAS_HINT}"
    return said


@check("ex02.scorer.outputs", kind="correctness", points=2, needs=("FixedScorer", "calibrate"), public=True)
def scorer_outputs(learner, ctx) -> None:
    """FixedScorer's outputs equal BrokenScorer's (same weights) on five seeded batches."""
    expect_cases(learner, public_cases(ctx), grads=False)


def compiled_beside_eager(learner, probe: str, batches: dict[str, torch.Tensor], count: int):
    """``probe``'s answer on ``batches``, whose compiled outputs ``out0``... must agree with the same code's eager
    outputs (``ex02.scorer``) at a compiled graph's tolerance: answers made up beside the code break the protocol.
    A ``Shortfall`` where the compiled graphs call code they do not show (``probes.outside_torch``)."""
    got = learner.ask(probe, {}, batches)
    own = learner.ask("ex02.scorer", {"batches": count, "grads": False}, batches)
    outputs = {f"out{i}": f"the compiled FixedScorer's output on batch {i}" for i in range(count)}
    assert_answers_consistent(got, own, outputs, rtol=1e-3, atol=1e-5)
    outside = got.strings("outside")
    if outside:
        raise Shortfall(
            f"the compiled graph of FixedScorer calls {', '.join(outside)}: code the graph does not show. Besides "
            "torch's own operators it may call only calibrate, once, on the top score of each row "
            "(calibrate(scores.detach().amax(-1))), so that the graph holds the scorer's work. Compute the rest "
            "with torch operations.",
            measured=len(outside),
            required=0,
        )
    strays = got.strings("strays")
    if strays:
        raise Shortfall(
            f"the compiled FixedScorer {', '.join(strays)} while it runs: forward may read only the rows it is "
            "handed, the weights and mean_activation, and change only mean_activation (one number), so that what "
            "it returns is what the graph computed.",
            measured=len(strays),
            required=0,
        )
    return got


@check("ex02.scorer.no_breaks", kind="structure", points=2, needs=("FixedScorer", "calibrate"), public=True)
def scorer_no_breaks(learner, ctx) -> Measured:
    """torch.compile captures FixedScorer as one graph, every linear layer in it and no graph break, on two batches
    of one shape (one takes the rescaling branch)."""
    model = broken()
    case = public_cases(ctx)[4]
    xs = [case.rows_on(), Case("rescaling", case.rows, seed=5, scale=40.0).rows_on()]
    batches = {**weights(model), **{f"x{i}": x for i, x in enumerate(xs)}}
    got = compiled_beside_eager(learner, "ex02.explain", batches, len(xs))
    linears, breaks = got.ints("linears"), got.value("break_count", int)
    if not linears:  # Dynamo gave up on forward (a break inside a loop does that) and ran it eagerly
        reasons = "; ".join(got.strings("reasons"))
        raise Shortfall(
            f"torch.compile captured no graph of FixedScorer: {reasons or 'Dynamo ran its forward eagerly'}. "
            "Make forward one graph that Dynamo captures whole",
            measured=max(breaks, 1),
            required=0,
        )
    if breaks or len(linears) != 1:
        reasons = "; ".join(got.strings("reasons"))
        breaks = max(breaks, len(linears) - 1)
        raise Shortfall(
            f"FixedScorer still has {breaks} graph break(s) in {len(linears)} graphs: "
            f"{reasons or 'see TORCH_LOGS=graph_breaks'}. This counts a plain torch.compile's graphs: "
            "fullgraph=True captures some lines that plain compiling breaks on (an .item(), a data-dependent "
            "size such as h[mask], as lesson 2 showed), so a model can compile with fullgraph=True and still "
            "break here",
            measured=breaks,
            required=0,
        )
    want = linear_layers(model)
    if linears[0] != want:
        raise Shortfall(
            f"the one graph holds {linears[0]} of FixedScorer's {want} linear layers: the rest ran outside it "
            "(torch.compiler.disable, or code Dynamo skips). Make forward one graph that Dynamo captures whole.",
            measured=linears[0],
            required=want,
        )
    return Measured(0, 0, "one graph, no breaks")
