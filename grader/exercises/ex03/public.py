"""Exercise 3, public checks (ship in the learner kit): the loss formula, the temperature scaling, where
Distiller's gradients go, and getting the student back out.

The loss checks compare with values stored in ``fixtures.safetensors`` (``make fixtures``), so the formula's
reference never ships; Distiller is checked against the learner's own DistillLoss on logits the judge computes
with the given models, and the extracted student against the given student. The hidden checks (bf16,
training with the compiled step, graph breaks, recompiles, speed) live in ``hidden.py``.
"""

from __future__ import annotations

import torch

from coursekit.lessons.distillation.givens import ALPHA, TEMPERATURE, batch, make_student, make_teacher
from grader.exercises.ex03.probes import FREEZE_HINT
from grader.judging import assert_close, fixture
from grader.registry import check

FORMULA = (
    "loss = alpha * T**2 * KL(softmax(teacher/T) || softmax(student/T)) + (1 - alpha) * CE(student, "
    "labels), the KL summed over classes and averaged over the batch (F.kl_div(..., "
    "reduction='batchmean')); F.kl_div takes the student's *log*-probabilities first."
)
SETTINGS = ((TEMPERATURE, ALPHA), (1.0, 0.5), (2.0, 0.9), (3.0, 0.0), (6.0, 1.0))
TEMPERATURES = (1.0, 2.0, 4.0, 8.0)


def logits(rows: int, classes: int, seed: int, scale: float = 3.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Student logits, teacher logits and labels, made on the CPU from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    student = torch.randn(rows, classes, generator=gen) * scale
    teacher = torch.randn(rows, classes, generator=gen) * scale
    return student, teacher, torch.randint(0, classes, (rows,), generator=gen)


def fixture_inputs() -> dict[str, torch.Tensor]:
    """The public cases' logits, as ``make fixtures`` stores them."""
    out = {}
    for i in range(len(SETTINGS)):
        out |= dict(zip((f"values.{i}.s", f"values.{i}.t", f"values.{i}.y"), logits(16, 10, seed=100 + i)))
    out |= dict(zip(("temperature.s", "temperature.t", "temperature.y"), logits(16, 10, seed=7)))
    return out


def ask_losses(
    learner, settings: list[tuple[float, float]], sets: list[tuple[torch.Tensor, ...]], bf16: bool = False
) -> torch.Tensor:
    """The learner's DistillLoss for each (temperature, alpha) on the matching logits."""
    tensors = {}
    for i, (s, t, y) in enumerate(sets):
        tensors |= {f"s{i}": s, f"t{i}": t, f"y{i}": y}
    got = learner.ask("ex03.loss", {"settings": [list(x) for x in settings], "bf16": bf16}, tensors)
    return got.tensor("losses", shape=(len(settings),))


@check("ex03.loss.values", kind="correctness", points=2, needs=("DistillLoss",), public=True)
def loss_values(learner, ctx) -> None:
    """DistillLoss matches the formula for several temperatures and mixing weights (float32)."""
    sets = [tuple(fixture("ex03", f"values.{i}.{k}") for k in "sty") for i in range(len(SETTINGS))]
    losses = ask_losses(learner, list(SETTINGS), sets)
    for i, (temperature, alpha) in enumerate(SETTINGS):
        assert_close(
            losses[i],
            fixture("ex03", f"values.{i}.loss"),
            torch.float32,
            f"DistillLoss(temperature={temperature}, alpha={alpha})",
            FORMULA,
        )


@check("ex03.loss.temperature", kind="correctness", points=1, needs=("DistillLoss",), public=True)
def loss_temperature(learner, ctx) -> None:
    """The soft term is scaled by T**2, so its gradients keep their size as the temperature grows."""
    s, t, y = (fixture("ex03", f"temperature.{k}") for k in "sty")
    losses = ask_losses(learner, [(temp, 1.0) for temp in TEMPERATURES], [(s, t, y)] * len(TEMPERATURES))
    ratios = {
        temp: float(losses[i]) / float(fixture("ex03", f"temperature.{i}.loss")) for i, temp in enumerate(TEMPERATURES)
    }
    shown = ", ".join(f"T={k:g}: {v:.4g}" for k, v in ratios.items())
    if all(abs(r * k**2 - 1) < 1e-3 for k, r in ratios.items()):
        raise AssertionError(
            f"with alpha=1 your loss / the reference is 1/T**2 ({shown}): multiply the soft term "
            "by T**2. Dividing the logits by T shrinks the soft term's gradients by 1/T**2; "
            "Hinton et al. scale it back so the two terms stay balanced at any temperature."
        )
    values = list(ratios.values())
    if not all(abs(r - 1) < 1e-3 for r in values) and max(values) - min(values) < 1e-3 * max(abs(v) for v in values):
        classes = s.shape[-1]  # the same ratio at every temperature: the temperature is right, a constant is not
        why = (
            f"1/{classes}: averaged over the {classes} classes as well as the rows?"
            if abs(values[0] * classes - 1) < 1e-3
            else "a constant factor"
        )
        raise AssertionError(
            f"with alpha=1 your loss / the reference is the same at every temperature ({shown}), so the temperature "
            f"is handled right and the reduction is not ({why}). F.kl_div's reduction='batchmean' sums over the "
            f"classes and averages over the rows; 'mean' also divides by the number of classes. {FORMULA}"
        )
    if not all(abs(r - 1) < 1e-3 for r in values):
        raise AssertionError(
            f"with alpha=1 (soft term only) your loss / the reference is {shown}; it should be 1 "
            f"at every temperature. Divide both logits by T before the softmaxes, then scale by "
            f"T**2. {FORMULA}"
        )


def given_models(ctx, seed: int):
    """The judge's copies of the given student and teacher built from ``seed`` (the worker builds the same)."""
    return make_student(ctx.profile, seed), make_teacher(ctx.profile, seed + 1)


def batch_inputs(name: str, images: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
    return {f"{name}.images": images.cpu(), f"{name}.labels": labels.cpu()}


@check("ex03.distiller.gradients", kind="correctness", points=2, needs=("Distiller", "DistillLoss"), public=True)
def distiller_gradients(learner, ctx) -> None:
    """Distiller returns your DistillLoss of the student's and the teacher's logits; backward reaches every student
    parameter and no teacher one."""
    student, teacher = given_models(ctx, 0)
    images, labels = batch(ctx.profile, seed=11)
    with torch.no_grad():
        s, t = student(images), teacher.eval()(images)
    got = learner.ask(
        "ex03.distiller",
        {"seed": 0},
        {**batch_inputs("batch", images, labels), "student_logits": s.cpu(), "teacher_logits": t.cpu()},
    )
    if got.value("teacher_training", bool):
        raise AssertionError(
            "after distiller.train() the teacher is in training mode: keep it in eval mode "
            "(override train() to call self.teacher.eval(), or set it after super().train())"
        )
    assert_close(
        got.tensor("loss"),
        got.tensor("own_loss"),
        torch.float32,
        "Distiller(images, labels) vs your DistillLoss(student(images), teacher(images), labels)",
        "Distiller.forward must run the student, the teacher (under no_grad), and return self.loss of their "
        "logits and the labels.",
    )
    touched = got.value("teacher_grads", int)
    if touched or got.value("teacher_requires_grad", bool):
        raise AssertionError(
            f"the teacher takes part in backward ({touched} of its parameters got a gradient): it "
            "costs memory and time, and an optimiser over distiller.parameters() would train it. " + FREEZE_HINT
        )
    missing = got.strings("student_missing")
    if missing:
        raise AssertionError(
            f"no gradient reached these student parameters: {missing}: is the student's output "
            "detached, or computed under no_grad?"
        )


@check(
    "ex03.extract.student",
    kind="correctness",
    points=1,
    needs=("extract_student", "Distiller", "DistillLoss"),
    public=True,
)
def extracted_student(learner, ctx) -> None:
    """extract_student gives back the plain student, from a Distiller or a compiled one, whose student may be
    compiled too, ready to save and run."""
    student, _ = given_models(ctx, 0)
    images, labels = batch(ctx.profile, seed=12)
    got = learner.ask("ex03.extract", {"seed": 0}, batch_inputs("batch", images, labels))
    for what, kind in got.value("returned", dict).items():
        if kind != "student":
            raise AssertionError(
                f"extract_student({str(what)[:80]}) returned a {str(kind)[:40]}, not the student module "
                "itself. A compiled module keeps the original in `._orig_mod`; its state_dict keys "
                "start with '_orig_mod.', which a plain ViT cannot load. The Distiller and the student inside "
                "it may each be compiled: unwrap both."
            )
    if got.value("orig_mod_keys", int):
        raise AssertionError("the extracted student's state_dict keys start with '_orig_mod.'")
    with torch.no_grad():
        assert_close(
            got.tensor("out"),
            student.eval()(images),
            torch.float32,
            "the extracted student's output",
            "Return the student module itself (model.student, each unwrapped from ._orig_mod when compiled).",
        )
