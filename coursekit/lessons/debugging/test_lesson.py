"""Lesson 5's planted compiler bugs install and uninstall cleanly, fail where the lesson and the checks say,
and the helpers that keep a process usable after a crashed compile do their job.

Most tests stop before Inductor generates code (a planted crash fails before code generation, a planted
decomposition is visible with ``aot_eager_decomp_partition``), so the file runs in well under a minute.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
import torch._functorch.config as functorch_config
import torch._inductor.config as inductor_config
from torch._inductor import decomposition, lowering

from coursekit.lessons import ROOT
from coursekit.lessons.debugging.givens import EXERCISE_BUGS, exercise_bugs, make_input, make_model
from coursekit.lessons.debugging.material import (
    KINDS,
    LADDER,
    LESSON_CASES,
    PLANTED_ENV,
    Bug,
    PlantedBugError,
    build_case,
    env_for,
    gist,
    install,
    measure_ladder,
    planted,
    reset_bisector,
    run_python,
)
from coursekit.versions import torch_before
from grader.context import Context
from grader.exercises.ex05.hidden import drawn, hidden_cases
from grader.exercises.ex05.probes import BACKWARD, DECOMPOSED, LOWERED, subject

aten = torch.ops.aten
LESSON_OPS = {"decomposition": {"gelu"}, "lowering": {"tanh", "rsqrt"}}
EXERCISE_OPS = {b.op for b in EXERCISE_BUGS}


@pytest.fixture(autouse=True)
def clean_dynamo():
    torch.compiler.reset()
    yield
    torch.compiler.reset()


def probe(op: str, decoy: str, seed: int):
    """The grader's one-operator model and its input, as its hidden checks build them."""
    return subject({"model": "probe", "op": op, "decoy": decoy, "seed": seed})


def tables() -> dict[str, dict]:
    """Identity of every entry of the tables a bug is planted in."""
    return {
        name: {k: id(v) for k, v in table.items()}
        for name, table in (
            ("decompositions", decomposition.decompositions),
            ("fast_random_decomps", decomposition.fast_random_decomps()),
            ("lowerings", lowering.lowerings),
        )
    }


def run(fn, args, backend):
    torch.compiler.reset()
    return torch.compile(fn, backend=backend)(*args)


@pytest.mark.parametrize("kind", list(KINDS))
def test_planted_bugs_leave_torch_exactly_as_it_was(kind: str) -> None:
    op = "hardswish" if kind.endswith("decomposition") else "sigmoid"
    before = tables()
    caches = (inductor_config.fx_graph_cache, functorch_config.enable_autograd_cache)
    with planted(Bug(kind, op)):
        assert tables() != before
        assert not inductor_config.fx_graph_cache and not functorch_config.enable_autograd_cache
    assert tables() == before
    assert (inductor_config.fx_graph_cache, functorch_config.enable_autograd_cache) == caches
    with pytest.raises(KeyError), planted(Bug(kind, op)):  # an error inside the block restores too
        raise KeyError("boom")
    assert tables() == before


def test_a_bug_that_cannot_be_planted_is_refused_and_nothing_stays_planted() -> None:
    before = tables()
    with pytest.raises(ValueError, match="no lowering"):
        install(Bug("crashing_lowering", "sigmoid"), Bug("wrong_lowering", "hardswish"))  # hardswish is decomposed
    assert tables() == before
    with pytest.raises(ValueError):
        Bug("misspelt_lowering", "exp")
    with pytest.raises(ValueError):
        Bug("crashing_lowering", "no_such_op")
    assert str(Bug("wrong_decomposition", "gelu")) == "wrong decomposition of aten.gelu"
    assert env_for(*EXERCISE_BUGS[:2]) == {PLANTED_ENV: "wrong_decomposition:hardswish,crashing_lowering:sigmoid"}


def test_pools_avoid_the_operators_the_notebooks_show() -> None:
    shown = EXERCISE_OPS | LESSON_OPS["decomposition"] | LESSON_OPS["lowering"]
    assert not shown & (set(DECOMPOSED) | set(LOWERED) | set(BACKWARD))
    assert set(BACKWARD.values()) <= set(DECOMPOSED)
    assert all(c.bugs == () or {b.op for b in c.bugs} <= shown for c in LESSON_CASES.values())
    (dec, low), (dec2, low2) = drawn(Context.create(secret=7)), drawn(Context.create(secret=7))
    assert (dec, low) == (dec2, low2) and len(set(dec)) == 3 and len(set(low)) == 3
    seeds = {tuple(drawn(Context.create(secret=s))[0]) for s in range(20)}
    assert len(seeds) > 5, "the secret seed should change which operators get a bug"
    for which in ("ladder", "culprit"):
        cases = hidden_cases(Context.create(secret=3), which)
        assert [c[3] for c in cases].count(None) == 1 and all(c[0] != c[1] for c in cases)


def test_a_culprit_model_with_a_bug_holds_two_operators_of_the_broken_ones_kind() -> None:
    """The failing rung says decomposition or lowering; only the bisector can then say which of the two operators
    (red team, session 35: the rung plus Inductor's decomposition table named every culprit)."""
    for seed in range(12):
        for op, decoy, bugs, _, _ in hidden_cases(Context.create(secret=seed), "culprit"):
            if bugs:
                kinds = {name in DECOMPOSED for name in (op, decoy)}
                assert len(kinds) == 1 and op != decoy, (seed, op, decoy, bugs)


@pytest.mark.parametrize("op", sorted(set(DECOMPOSED) | {"hardswish", "gelu"}))
def test_a_planted_decomposition_shows_from_aot_eager_decomp_partition_on(op: str) -> None:
    model, args = (
        probe(op, "exp", seed=1)
        if op in DECOMPOSED
        else (lambda x: getattr(torch.nn.functional, op)(x) * 2, (make_input(1),))
    )
    expected = model(*args)
    with planted(Bug("wrong_decomposition", op)):
        torch.testing.assert_close(run(model, args, "aot_eager"), expected)
        assert (run(model, args, "aot_eager_decomp_partition") - expected).abs().max() > 1e-3
    with planted(Bug("crashing_decomposition", op)):
        torch.testing.assert_close(run(model, args, "aot_eager"), expected)
        with pytest.raises(Exception, match=f"planted bug: crashing decomposition of aten.{op}"):
            run(model, args, "aot_eager_decomp_partition")
    torch.testing.assert_close(run(model, args, "aot_eager_decomp_partition"), expected)


@pytest.mark.parametrize("op", sorted(set(LOWERED) | {"sigmoid", "tanh", "rsqrt"}))
def test_a_planted_lowering_crashes_only_inductor_on_a_node_named_after_it(op: str) -> None:
    """The bisector reports a lowering by its graph node's name: it must be the operator's, with a suffix."""
    if op in LOWERED:
        model, args = probe(op, "elu", seed=2)
    else:  # the lesson's and the exercise's operators
        model, args = (lambda x: getattr(torch, op)(x.abs() + 1) * 2), (make_input(2),)
    expected = model(*args)
    names = []

    def record(graph: torch.fx.Graph) -> None:
        names.extend(n.name for n in graph.nodes if n.target == getattr(aten, op).default)

    with planted(Bug("crashing_lowering", op)), inductor_config.patch(post_grad_custom_post_pass=record):
        torch.testing.assert_close(run(model, args, "aot_eager_decomp_partition"), expected, rtol=1e-3, atol=1e-4)
        with pytest.raises(Exception, match=f"planted bug: crashing lowering of aten.{op}") as info:
            run(model, args, "inductor")
    assert names and all(re.fullmatch(rf"{op}(_\d+)?", n) for n in names), names
    assert gist(info.value) == f"PlantedBugError: planted bug: crashing lowering of aten.{op}"


def outputs_and_grads(fn, model: torch.nn.Module, args: tuple) -> list[torch.Tensor]:
    out = fn(*args)
    return [out.detach(), *torch.autograd.grad(out.sum(), list(model.parameters()))]


def test_a_planted_backward_decomposition_changes_only_gradients_from_aot_eager_decomp_partition_on() -> None:
    """Every operator of the hidden checks' backward pool: the output stays right, a gradient goes wrong."""
    for op, forward in BACKWARD.items():
        model, args = subject({"model": "probe", "op": forward, "decoy": "sin", "seed": 5, "grad": True})
        expected = outputs_and_grads(model, model, args)
        with planted(Bug("wrong_decomposition", op)):
            for backend in ("aot_eager", "aot_eager_decomp_partition"):
                torch.compiler.reset()
                got = outputs_and_grads(torch.compile(model, backend=backend), model, args)
                torch.testing.assert_close(got[0], expected[0], rtol=1e-3, atol=1e-4)
                wrong = any(not torch.allclose(g, e, rtol=1e-3, atol=1e-4) for g, e in zip(got[1:], expected[1:]))
                assert wrong == (backend == "aot_eager_decomp_partition"), (op, backend)


def test_a_planted_wrong_lowering_shows_only_with_inductor() -> None:
    model, args = probe("cos", "elu", seed=3)
    expected = model(*args)
    with planted(Bug("wrong_lowering", "cos")):
        torch.testing.assert_close(run(model, args, "aot_eager_decomp_partition"), expected, rtol=1e-3, atol=1e-4)
        assert (run(model, args, "inductor") - expected).abs().max() > 1e-3
    torch.testing.assert_close(run(model, args, "inductor"), expected, rtol=1e-3, atol=1e-4)


def test_the_exercise_bugs_break_gated_mlp_at_the_rungs_the_exercise_expects() -> None:
    model, x = make_model(0).requires_grad_(False), make_input(0)
    expected = model(x)
    with exercise_bugs():
        rows = measure_ladder(model, (x,), backends=LADDER[:3])
    assert [r["status"] for r in rows] == ["ok", "ok", "wrong"]
    with planted(EXERCISE_BUGS[1]):
        with pytest.raises(Exception, match="aten.sigmoid"):
            run(model, (x,), "inductor")
    torch.testing.assert_close(run(model, (x,), "aot_eager"), expected)
    trainable = make_model(0)  # the third bug is in a backward: it shows only in a training graph's gradients
    want = outputs_and_grads(trainable, trainable, (x,))
    with planted(EXERCISE_BUGS[2]):
        torch.compiler.reset()
        got = outputs_and_grads(torch.compile(trainable, backend="aot_eager_decomp_partition"), trainable, (x,))
    torch.testing.assert_close(got[0], want[0], rtol=1e-3, atol=1e-4)
    assert not torch.allclose(got[1], want[1], rtol=1e-3, atol=1e-4)  # norm.weight's gradient


def test_the_bisector_names_a_planted_decomposition_and_is_switched_off_afterwards() -> None:
    from torch._inductor.compiler_bisector import CompilerBisector

    model, args = probe("softplus", "sin", seed=4)
    expected = model(*args)

    def test() -> bool:
        torch.compiler.reset()
        try:
            return torch.allclose(torch.compile(model)(*args), expected, rtol=1e-3, atol=1e-4)
        except Exception:  # noqa: BLE001
            return False

    with planted(Bug("crashing_decomposition", "softplus")):
        result = CompilerBisector.do_bisect(test)
    assert (result.backend, result.subsystem) == ("aot_eager_decomp_partition", "decomposition")
    assert "aten.softplus" in result.debug_info
    assert not reset_bisector(), "do_bisect should have cleaned up after itself"


def test_reset_bisector_switches_off_a_bisection_left_half_way(tmp_path) -> None:
    from torch._inductor.compiler_bisector import CompilerBisector

    CompilerBisector.in_process_cache = str(tmp_path / "bisect-state")
    CompilerBisector.bisection_enabled = True
    CompilerBisector.initialize_system()  # as do_bisect does: the bisector now overrides every backend
    assert CompilerBisector.get_backend() == "eager"
    assert reset_bisector()
    assert CompilerBisector.get_backend() is None and not CompilerBisector.bisection_enabled
    assert not (tmp_path / "bisect-state").exists()


def test_lesson_cases_build() -> None:
    for name in LESSON_CASES:
        model, args = build_case(name)
        assert model(*args).shape in {torch.Size([4, 10]), torch.Size([])}


def test_inference_mode_teacher_breaks_the_process_and_restore_dispatch_state_repairs_it() -> None:
    """In a child process: the real failure at aot_eager, the dispatcher keys it leaves switched on, the repair."""
    script = textwrap.dedent("""
        import torch
        from coursekit.lessons.debugging.material import (build_case, leftover_dispatch_keys, measure_ladder,
                                         restore_dispatch_state)
        model, args = build_case("inference-mode teacher")
        with restore_dispatch_state() as before:
            try:
                torch.compile(model, backend="aot_eager")(*args)
            except Exception:
                pass
            left = leftover_dispatch_keys(before)
            try:
                torch.empty(3)
                broken = False
            except RuntimeError as exc:
                broken = "PythonDispatcherTLS" in str(exc)
        torch.empty(3)
        rows = measure_ladder(model, args, backends=("eager", "aot_eager", "aot_eager_decomp_partition"))
        torch.empty(3)  # run_rung restores the dispatcher state after each rung
        torch.compiler.reset()
        out = torch.compile(lambda x: (x.sin() * 2).sum(), backend="aot_eager")(torch.ones(3, requires_grad=True))
        out.backward()
        print([r["status"] for r in rows], rows[1]["error"], left, broken, sep="|")
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    statuses, error, left, broken = proc.stdout.strip().splitlines()[-1].split("|")
    assert statuses == "['ok', 'crash', 'crash']"
    # torch 2.14 names the cause; torch 2.11 crashes on the same trace with a RuntimeError about a weakref
    assert "inference tensor" in error or (torch_before(2, 14) and error.startswith("BackendCompilerFailed")), error
    assert "+PythonDispatcher" in left and broken == "True"


def test_plant_from_env_installs_bugs_in_a_child_process() -> None:
    script = (
        "from coursekit.lessons.debugging.material import plant_from_env; import torch; bugs = plant_from_env(); "
        "f = torch._inductor.decomposition.decompositions[torch.ops.aten.gelu.default]; "
        "print(len(bugs), f.__name__)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env_for(Bug("crashing_decomposition", "gelu"))}
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-2:] == ["1", "crash"]


def test_crash_message_gist() -> None:
    assert gist(PlantedBugError("planted bug: crashing decomposition of aten.gelu")) == (
        "planted bug: crashing decomposition of aten.gelu"
    )
    wrapped = RuntimeError(
        "LoweringException: PlantedBugError: planted bug: x\n  target: aten.x.default\n\n"
        "Set TORCHDYNAMO_VERBOSE=1 for the internal stack trace"
    )
    assert gist(wrapped) == "PlantedBugError: planted bug: x"
    assert gist(RuntimeError("backend='aot_eager' raised:\nRuntimeError: Cannot set version_counter")) == (
        "RuntimeError: Cannot set version_counter"
    )


def test_a_script_past_its_time_limit_stops_with_a_message_not_a_bare_timeout(tmp_path) -> None:
    with pytest.raises(TimeoutError, match="(?s)ran past its 1 s limit.*pass a larger timeout.*about to sleep"):
        run_python("import sys, time; print('about to sleep', file=sys.stderr, flush=True); time.sleep(30)", tmp_path,
                   timeout=1)  # fmt: skip


class _Answers:
    """A learner whose ``first_failing_backend`` answers ``answer`` whatever it is asked."""

    def __init__(self, answer: str | None) -> None:
        self.values = {"answer": answer, "type": type(answer).__name__}

    def ask(self, probe: str, args: dict, *rest, **kwargs) -> _Answers:
        return self


@pytest.mark.parametrize("expected", [None, "inductor"])
def test_a_ladder_whose_eager_rung_fails_is_told_to_look_at_its_own_code(expected: str | None) -> None:
    """A blind learner, session 36: a NameError inside the ladder's ``except Exception`` made every rung fail, and
    the message spoke only of tolerances. An eager rung that fails now points at the learner's own code."""
    from grader.exercises.ex05.public import expect_backend

    with pytest.raises(AssertionError, match="almost always in your own code") as info:
        expect_backend(_Answers("eager"), {}, (), expected, "a case")
    assert "tolerance" in str(info.value)  # the advice for a comparison without one stays
    with pytest.raises(AssertionError) as info:
        expect_backend(_Answers("aot_eager"), {}, (), expected, "a case")
    assert "in your own code" not in str(info.value)
