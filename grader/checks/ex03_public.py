"""Exercise 3, public checks: the ones a learner runs inside the exercise notebook.

This module ships in the learner kit (``make release``): the loss formula, the
temperature scaling, where gradients go, and getting the student back out.
The hidden checks (bf16, training with a compiled step, graph breaks,
recompiles, speed) live in ``grader.checks.ex03``, which imports from here.
"""

from __future__ import annotations

import torch
from torch import nn

from coursekit.ex03 import ALPHA, TEMPERATURE, batch, make_student, make_teacher
from grader.checks.common import assert_close, require_tensor
from grader.reference.ex03 import kd_loss
from grader.registry import check

FORMULA = ("loss = alpha * T**2 * KL(softmax(teacher/T) || softmax(student/T)) + (1 - alpha) * CE(student, "
           "labels), the KL summed over classes and averaged over the batch (F.kl_div(..., "
           "reduction='batchmean')); F.kl_div takes the student's *log*-probabilities first.")
FREEZE_HINT = ("Freeze the teacher in Distiller.__init__ (teacher.eval().requires_grad_(False)) and run it under "
               "torch.no_grad() in forward.")


def logits(rows: int, classes: int, seed: int, scale: float = 3.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Student logits, teacher logits and labels, made on the CPU from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    student = torch.randn(rows, classes, generator=gen) * scale
    teacher = torch.randn(rows, classes, generator=gen) * scale
    return student, teacher, torch.randint(0, classes, (rows,), generator=gen)


def loss_module(sub, temperature: float, alpha: float) -> nn.Module:
    """The learner's ``DistillLoss(temperature, alpha)``, checked to be a module."""
    loss = sub.get("DistillLoss")(temperature=temperature, alpha=alpha)
    if not isinstance(loss, nn.Module):
        raise AssertionError("DistillLoss must be an nn.Module subclass")
    return loss


def distiller_parts(sub, ctx, seed: int = 0) -> tuple[nn.Module, nn.Module, nn.Module]:
    """A learner ``Distiller`` built on fresh given models: ``(distiller, student, teacher)``."""
    student, teacher = make_student(ctx.profile, seed), make_teacher(ctx.profile, seed + 1)
    distiller = sub.get("Distiller")(student, teacher, loss_module(sub, TEMPERATURE, ALPHA))
    if not isinstance(distiller, nn.Module):
        raise AssertionError("Distiller must be an nn.Module subclass")
    return distiller.to(ctx.device), student, teacher


@check("ex03.loss.values", kind="correctness", points=2, needs=("DistillLoss",), public=True)
def loss_values(sub, ctx) -> None:
    """DistillLoss matches the formula for several temperatures and mixing weights (float32)."""
    for i, (temperature, alpha) in enumerate([(TEMPERATURE, ALPHA), (1.0, 0.5), (2.0, 0.9), (3.0, 0.0),
                                              (6.0, 1.0)]):
        s, t, y = logits(16, 10, seed=100 + i)
        got = loss_module(sub, temperature, alpha)(s.to(ctx.device), t.to(ctx.device), y.to(ctx.device))
        assert_close(got, kd_loss(s, t, y, temperature, alpha), torch.float32,
                     f"DistillLoss(temperature={temperature}, alpha={alpha})", FORMULA)


@check("ex03.loss.temperature", kind="correctness", points=1, needs=("DistillLoss",), public=True)
def loss_temperature(sub, ctx) -> None:
    """The soft term is scaled by T**2, so its gradients keep their size as the temperature grows."""
    s, t, y = logits(16, 10, seed=7)
    ratios = {}
    for temperature in (1.0, 2.0, 4.0, 8.0):
        got = require_tensor(loss_module(sub, temperature, 1.0)(s.to(ctx.device), t.to(ctx.device),
                                                                 y.to(ctx.device)), "DistillLoss's result")
        ratios[temperature] = float(got.detach().double().cpu()) / float(kd_loss(s, t, y, temperature, 1.0))
    shown = ", ".join(f"T={k:g}: {v:.4g}" for k, v in ratios.items())
    if all(abs(r * k**2 - 1) < 1e-3 for k, r in ratios.items()):
        raise AssertionError(f"with alpha=1 your loss / the reference is 1/T**2 ({shown}): multiply the soft term "
                             "by T**2. Dividing the logits by T shrinks the soft term's gradients by 1/T**2; "
                             "Hinton et al. scale it back so the two terms stay balanced at any temperature.")
    if not all(abs(r - 1) < 1e-3 for r in ratios.values()):
        raise AssertionError(f"with alpha=1 (soft term only) your loss / the reference is {shown}; it should be 1 "
                             f"at every temperature. Divide both logits by T before the softmaxes, then scale by "
                             f"T**2. {FORMULA}")


@check("ex03.distiller.gradients", kind="correctness", points=2, needs=("Distiller", "DistillLoss"), public=True)
def distiller_gradients(sub, ctx) -> None:
    """Distiller returns the distillation loss; backward reaches every student parameter and no teacher one."""
    distiller, student, teacher = distiller_parts(sub, ctx)
    distiller.train()
    if teacher.training:
        raise AssertionError("after distiller.train() the teacher is in training mode: keep it in eval mode "
                             "(override train() to call self.teacher.eval(), or set it after super().train())")
    images, labels = batch(ctx.profile, seed=11)
    loss = require_tensor(distiller(images, labels), "Distiller's output")
    with torch.no_grad():
        expected = kd_loss(student(images), teacher(images), labels, TEMPERATURE, ALPHA)
    assert_close(loss, expected, torch.float32, "Distiller(images, labels)", FORMULA)
    loss.backward()
    touched = [n for n, p in teacher.named_parameters() if p.grad is not None]
    if touched or any(p.requires_grad for p in teacher.parameters()):
        raise AssertionError(f"the teacher takes part in backward ({len(touched)} of its parameters got a "
                             f"gradient): it costs memory and time, and an optimiser over distiller.parameters() "
                             f"would train it. {FREEZE_HINT}")
    missing = [n for n, p in student.named_parameters() if p.grad is None]
    if missing:
        raise AssertionError(f"no gradient reached these student parameters: {missing[:5]}: is the student's "
                             "output detached, or computed under no_grad?")


@check("ex03.extract.student", kind="correctness", points=1, needs=("extract_student", "Distiller", "DistillLoss"),
       public=True)
def extract_student(sub, ctx) -> None:
    """extract_student gives back the plain student, from a Distiller or a compiled one, ready to save and run."""
    distiller, student, _ = distiller_parts(sub, ctx)
    extract = sub.get("extract_student")
    compiled = torch.compile(distiller, backend="eager")  # wrapping only: no compile happens until a call
    for what, model in (("a Distiller", distiller), ("torch.compile(distiller)", compiled)):
        got = extract(model)
        if got is not student:
            kind = type(got).__name__
            raise AssertionError(f"extract_student({what}) returned a {kind}, not the student module itself. A "
                                 "compiled module keeps the original in `._orig_mod`; its state_dict keys start "
                                 "with '_orig_mod.', which a plain ViT cannot load.")
    keys = list(extract(compiled).state_dict())
    if any(k.startswith("_orig_mod.") for k in keys):
        raise AssertionError("the extracted student's state_dict keys start with '_orig_mod.'")
    images, _ = batch(ctx.profile, seed=12)
    with torch.no_grad():
        require_tensor(extract(compiled).eval()(images), "the extracted student's output")
