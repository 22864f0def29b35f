"""Exercise 3, worker side: the learner's loss, Distiller, train step and extract_student on the given models.

Student and teacher are the given timm ViTs, built here from the judge's seeds with the given code; the judge
builds the same models from the same seeds for its reference.
"""

from __future__ import annotations

import torch
from torch import nn

from coursekit.lessons.distillation.givens import ALPHA, TEMPERATURE, make_optimizer, make_student, make_teacher
from coursekit.profile import get_profile
from grader.probing import (
    Call,
    Failure,
    Reply,
    compiled_work,
    graph_runs,
    learner_call,
    linear_calls,
    linear_nodes,
    module_tensors,
    plain,
    probe,
    stage_timed,
)

FREEZE_HINT = (
    "Freeze the teacher in Distiller.__init__ (teacher.eval().requires_grad_(False)) and run it under "
    "torch.no_grad() in forward."
)
INFERENCE_HINT = (
    "Tensors made under torch.inference_mode() cannot be saved for backward, and AOTAutograd may refuse them "
    "inside a training graph (torch 2.11 does): run the teacher under torch.no_grad() instead."
)


def loss_module(call: Call, temperature: float, alpha: float) -> nn.Module:
    loss = call.get("DistillLoss")(temperature=temperature, alpha=alpha)
    if not isinstance(loss, nn.Module):
        raise Failure("DistillLoss must be an nn.Module subclass")
    return loss


@probe("ex03.loss")
def loss(call: Call) -> Reply:
    """``DistillLoss(T, alpha)`` on each of the judge's logit sets (under bf16 autocast when asked)."""
    values = []
    autocast = call.arg("bf16")
    for i, (temperature, alpha) in enumerate(call.arg("settings")):
        module = loss_module(call, temperature, alpha)
        args = (call.input(f"s{i}"), call.input(f"t{i}"), call.input(f"y{i}"))
        if autocast:
            with torch.autocast(torch.device(call.device).type, torch.bfloat16):
                got = learner_call(module, args, f"DistillLoss(temperature={temperature}, alpha={alpha})")
        else:
            got = learner_call(module, args, f"DistillLoss(temperature={temperature}, alpha={alpha})")
        value = plain(got, "DistillLoss's result")
        if value.dim() != 0:
            raise Failure(
                f"DistillLoss returned a tensor of shape {tuple(value.shape)}: reduce to one number for "
                "the batch (a scalar)"
            )
        values.append(value.to(torch.float64))
    return Reply(tensors={"losses": torch.stack(values)})


def parts(call: Call, compiled_student: bool = False) -> tuple[nn.Module, nn.Module, nn.Module]:
    """A learner ``Distiller`` on fresh given models from the judge's seeds: ``(distiller, student, teacher)``,
    the plain student handed to it wrapped in ``torch.compile`` when ``compiled_student``."""
    profile = get_profile(None, call.device)
    seed = int(call.arg("seed"))
    student, teacher = make_student(profile, seed), make_teacher(profile, seed + 1)
    given = torch.compile(student, backend="eager") if compiled_student else student  # wrapping only
    distiller = call.get("Distiller")(given, teacher, loss_module(call, TEMPERATURE, ALPHA))
    if not isinstance(distiller, nn.Module):
        raise Failure("Distiller must be an nn.Module subclass")
    return distiller.to(call.device), student, teacher


def images(call: Call, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    return call.input(f"{name}.images"), call.input(f"{name}.labels")


@probe("ex03.distiller")
def distiller(call: Call) -> Reply:
    """Distiller's loss and where its gradients went, and the learner's DistillLoss on the judge's logits."""
    model, student, teacher = parts(call)
    model.train()
    x, y = images(call, "batch")
    out = learner_call(model, (x, y), "Distiller(images, labels)")
    got = plain(out, "Distiller's output")
    out.backward()
    own = learner_call(
        loss_module(call, TEMPERATURE, ALPHA),
        (call.input("student_logits"), call.input("teacher_logits"), y),
        "DistillLoss",
    )
    return Reply(
        {
            "teacher_training": teacher.training,
            "teacher_grads": sum(p.grad is not None for p in teacher.parameters()),
            "teacher_requires_grad": any(p.requires_grad for p in teacher.parameters()),
            "student_missing": [n for n, p in student.named_parameters() if p.grad is None][:5],
        },
        {"loss": got, "own_loss": plain(own, "DistillLoss's result")},
    )


@probe("ex03.extract")
def extract(call: Call) -> Reply:
    """``extract_student`` on a Distiller and on ``torch.compile`` of one, each with a plain and a compiled
    student: what it returns, and the output and state_dict keys of the most wrapped case's answer."""
    fn = call.get("extract_student")
    kinds = {}
    for compiled_student in (False, True):
        model, student, _ = parts(call, compiled_student)
        inner = "torch.compile(student)" if compiled_student else "student"
        for what, wrapped in (
            (f"Distiller({inner}, ...)", model),
            (f"torch.compile(Distiller({inner}, ...))", torch.compile(model, backend="eager")),  # wrapping only
        ):
            got = learner_call(fn, (wrapped,), f"extract_student({what})")
            kinds[what] = "student" if got is student else type(got).__name__
    plain_student = learner_call(fn, (wrapped,), "extract_student")
    keys = list(plain_student.state_dict())
    with torch.no_grad():
        out = plain(
            learner_call(plain_student.eval(), (call.input("batch.images"),), "the extracted student"),
            "the extracted student's output",
        )
    return Reply({"returned": kinds, "orig_mod_keys": sum(k.startswith("_orig_mod.") for k in keys)}, {"out": out})


def run_step(step, x: torch.Tensor, y: torch.Tensor, what: str, raw: list | None = None) -> torch.Tensor:
    """One learner step; a failure inside torch.compile becomes a message that says where to look. The loss as the
    step returned it is appended to ``raw`` where given (the result is a copy)."""
    try:
        loss = step(x, y)
    except (NotImplementedError, AssertionError):
        raise
    except Exception as exc:  # noqa: BLE001 - a compile or autograd error: report its gist
        text = str(exc)
        lines = [ln for ln in text.splitlines() if ln.strip()]
        gist = next((ln for ln in lines if "Error" in ln or "inference" in ln.lower()), lines[0] if lines else "")
        hint = INFERENCE_HINT if "nference" in text else "Run it eagerly first to find the line."
        raise Failure(f"{what} raised {type(exc).__name__}: {gist.strip()[:300]}. {hint}", unsettled=True) from None
    out = plain(loss, f"{what}'s result")
    if raw is not None:
        raw.append(loss)
    if loss.requires_grad:
        raise Failure(
            f"{what} returned a loss that still requires grad: return loss.detach() so the caller does not "
            "keep the whole graph alive"
        )
    return out


def compiled_step(call: Call, model: nn.Module, backend: object = "inductor"):
    step = call.get("make_train_step")(model, make_optimizer(model), backend=backend)
    if not callable(step):
        raise Failure("make_train_step must return a function step(images, labels) -> loss")
    return step


@probe("ex03.train")
def train(call: Call) -> Reply:
    """The learner's compiled train step over the judge's batches; the teacher afterwards, the extracted student's
    weights, and a plain ViT loaded from them."""
    model, student, teacher = parts(call)
    teacher_before = {k: v.detach().clone() for k, v in teacher.state_dict().items()}
    step = compiled_step(call, model.train())
    losses = [run_step(step, *images(call, f"step{i}"), f"step {i}") for i in range(int(call.arg("steps")))]
    changed = [n for n, v in teacher.state_dict().items() if not torch.equal(v, teacher_before[n])]
    if not call.arg("extract", True):  # only the losses: the asking check does not read extract_student
        return Reply({"teacher_changed": changed[:5]}, {"losses": torch.stack(losses)})
    extracted = learner_call(call.get("extract_student"), (model,), "extract_student(distiller)")
    if not isinstance(extracted, nn.Module):
        raise Failure(f"extract_student(distiller) returned a {type(extracted).__name__}, not a module")
    fresh = make_student(get_profile(None, call.device), seed=123)  # a fresh ViT with the student's architecture
    try:
        fresh.load_state_dict(extracted.state_dict())
    except RuntimeError as exc:
        raise Failure(f"a plain student cannot load the extracted student's state_dict: {str(exc)[:200]}") from None
    x, _ = images(call, "check")
    with torch.no_grad():
        outs = {
            "plain_out": plain(fresh.eval()(x), "a plain student's output"),
            "extracted_out": plain(extracted.eval()(x), "the extracted student's output"),
        }
    weights = {f"w.{k}": v.detach().cpu() for k, v in extracted.state_dict().items()}
    return Reply(
        {"teacher_changed": changed[:5], "is_student": extracted is student},
        {"losses": torch.stack(losses), **outs, **weights},
    )


WHOLE_WORK = "every linear layer of the student and the teacher, on the whole batch"
STUDENT_WORK = "the student's linear layers, on the whole batch"


def on_rows(rows: int, *models: nn.Module):
    """A graph's weight for ``GraphRuns.answer_made``: 1 where it runs at least as many linear layers as ``models``
    hold, each on ``rows`` rows (the whole batch), else 0. Red team, session 48: a graph of the Distiller on one
    image, whose output was a slot the eager step had filled, passed for the step's loss."""
    wanted = sum(isinstance(m, nn.Linear) for model in models for m in model.modules())

    def weight(graph: torch.fx.GraphModule) -> int:
        leads = []
        for node in linear_nodes(graph):
            value = node.args[0].meta.get("example_value") if isinstance(node.args[0], torch.fx.Node) else None
            lead = value.shape[0] if isinstance(value, torch.Tensor) and value.dim() else None
            if isinstance(lead, torch.SymInt):  # a dynamic batch: the size it was traced with
                lead = getattr(lead.node, "hint", None)
            leads.append(lead)
        return int(len(leads) >= wanted > 0 and all(isinstance(lead, int) and lead == rows for lead in leads))

    return weight


@probe("ex03.frames")
def frames(call: Call) -> Reply:
    """Frames the step compiles over two steps with a counting backend; then, after them, whether more steps
    recompile under ``set_stance("fail_on_recompile")``: a refused recompile, or a graph compiled all the same (code
    that sets its own stance inside the step), and the linear layers the compiled graphs ran in the busier warm-up
    step (``warm_linears``) and in all the steps after (``stance_linears``): a step that runs eagerly after warm-up,
    or falls back to eager, shows there (red team, session 39). ``unmade`` says of the first step whose loss the
    compiled Distiller did not make, with a backward through it, why (``GraphRuns.answer_made``; red team, session
    47: the Distiller run eagerly beside a compiled shadow of itself on one image); ``idle``, of the first step in
    which no compiled graph trained the student on the whole batch (a graph that holds its linear layers, run with
    gradients, a backward through it), why."""
    model, student, teacher = parts(call)
    torch.compiler.reset()
    counter = graph_runs("inductor", detail=False)
    work = compiled_work(counter, linear_calls)
    held, unmade, idle = module_tensors(model), [], []  # before make_train_step can add any
    rows = images(call, "step0")[0].shape[0]
    whole, trained = on_rows(rows, student, teacher), on_rows(rows, student)
    step = compiled_step(call, model.train(), backend=counter)

    def judged(name: str, what: str, stance: bool = False) -> torch.Tensor:
        """One step, whose loss must be the compiled Distiller's; under the stance, the step's own errors (a refused
        recompile) reach the caller as they are."""
        counter.made, raw, batch = [], [], images(call, name)
        if stance:
            raw.append(step(*batch))
        out = None if stance else run_step(step, *batch, what, raw)
        allowed = held | {t.data_ptr() for t in batch}
        why = counter.answer_made(raw[0], whole, allowed, batch, WHOLE_WORK)
        if why and not unmade:
            unmade.append(f"{what}: {why}")
        why = counter.answer_made(None, trained, allowed, batch, STUDENT_WORK)
        if why and not idle:
            idle.append(f"{what}: {why}")
        counter.made = None
        return out

    losses, warm_linears = [], []
    for i in range(2):
        before = work()
        losses.append(judged(f"step{i}", f"step {i}"))
        warm_linears.append(work() - before)
    recompiled, frames, before = None, counter.frame_count, work()
    if call.arg("stance_steps"):
        try:
            with torch.compiler.set_stance("fail_on_recompile"):
                for i in range(int(call.arg("stance_steps"))):
                    judged(f"stance{i}", f"step {i + 2}", stance=True)
        except Exception as exc:  # noqa: BLE001 - the stance raises a dynamo error naming the guard
            recompiled = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            recompiled += " [inference]" if "nference" in str(exc) else ""
        if recompiled is None and counter.frame_count > frames:
            recompiled = (
                f"{counter.frame_count - frames} more graph(s) compiled under set_stance('fail_on_recompile'): "
                "does your step set a stance of its own?"
            )
    linears = sum(linear_calls(g) for g in counter.graphs)
    return Reply(
        {
            "frames": frames,
            "linears": linears,
            "recompiled": recompiled,
            "warm_linears": max(warm_linears),
            "stance_linears": work() - before,
            "unmade": unmade[0] if unmade else None,
            "idle": idle[0] if idle else None,
        },
        {"losses": torch.stack(losses)},
    )


@probe("ex03.timed_step")
def timed_step(call: Call) -> Reply:
    """Stage the learner's compiled train step (compiled during the judge's warm-up) for ``timing.run``; the
    backend counts what it compiles: the linear layers its graphs hold (the student's and the teacher's)."""
    model, _, _ = parts(call)
    torch.compiler.reset()
    counter = graph_runs("inductor", detail=False)
    step = compiled_step(call, model.train(), backend=counter)
    for i in range(2):  # compile outside the timed trials, and surface compile errors with a hint
        run_step(step, *images(call, f"warm{i}"), "the compiled step")
    # every timed step must call the linear layers in compiled graphs (one compiled for the warm-up only shows)
    reply = stage_timed(call, call.arg("handle"), step, work=compiled_work(counter, linear_calls))
    return Reply({**reply.values, "linears": sum(linear_calls(g) for g in counter.graphs)})
