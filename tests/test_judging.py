"""The judge's comparisons: tolerances per dtype and device class."""

from __future__ import annotations

import pytest
import torch

from grader import judging


@pytest.fixture
def device_class():
    yield judging.use_device_class
    judging.use_device_class("cpu")


def test_float32_tolerance_widens_on_a_gpu_for_reduction_order_but_not_for_wrong_answers(device_class) -> None:
    expected = torch.tensor([0.01, -0.02, 0.5])
    reordered = expected + torch.tensor([5e-5, -5e-5, 0.0])  # what the H100 run saw from honest solutions
    wrong = expected + torch.tensor([1e-2, 0.0, 0.0])
    device_class("cpu")
    with pytest.raises(AssertionError, match="rtol=0.0001, atol=1e-05"):
        judging.assert_close(reordered, expected, torch.float32, "masked mean")
    device_class("cuda")
    judging.assert_close(reordered, expected, torch.float32, "masked mean")
    with pytest.raises(AssertionError, match="max abs difference 0.01"):
        judging.assert_close(wrong, expected, torch.float32, "masked mean")
    assert judging.tolerance(torch.bfloat16) == judging.TOLERANCES[torch.bfloat16]


def test_a_speed_checks_linear_gate_fails_without_a_measurement() -> None:
    """In a structure check the linear-layer count is the measurement; in a speed check it is a precondition, and a
    count shown as "11.00x against 22.00x" (in the report and its chart) would read as a speedup."""
    from grader.judging import expect_linears
    from grader.registry import Shortfall

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    with pytest.raises(Shortfall) as counted:
        expect_linears(1, (model,), "the graphs", "Compile it.")
    assert (counted.value.measured, counted.value.required) == (1, 2)
    with pytest.raises(AssertionError) as gated:
        expect_linears(1, (model,), "the graphs", "Compile it.", gate=True)
    assert not isinstance(gated.value, Shortfall) and "1 of the model's 2 linear layers" in str(gated.value)
    expect_linears(2, (model,), "the graphs", "Compile it.", gate=True)  # enough: no error


@pytest.mark.parametrize("model_right", [True, False])
def test_a_wrong_custom_op_is_named_as_the_culprit_where_the_model_around_it_is_right(model_right: bool) -> None:
    """Exercise 2 (instructor walkthrough, session 31): a calibrate with its table's x and y swapped failed
    FixedScorer's outputs with a hint about FixedScorer's own fixes. Where the outputs match with the grader's
    correct calibrate in its place, the message says calibrate is what to fix; where they do not, it does not."""
    from types import SimpleNamespace

    from grader.exercises.ex02.public import CALIBRATE_HINT, broken, expect_cases, public_cases
    from grader.protocol import Answer

    asked = []

    def ask(probe: str, args: dict, tensors: dict) -> Answer:
        asked.append(bool(args.get("twin")))
        model = broken()
        with torch.no_grad():
            outs = {f"out{i}": model(tensors[f"x{i}"]) for i in range(args["batches"])}
        wrong = not (args.get("twin") and model_right)
        return Answer(probe, {}, {k: v + 1.0 if wrong else v for k, v in outs.items()})

    learner = SimpleNamespace(ask=ask)
    cases = public_cases(SimpleNamespace(profile=SimpleNamespace(batch_size=8)))
    with pytest.raises(AssertionError) as failed:
        expect_cases(learner, cases, grads=False)
    assert asked == [False, True], "the grader asks again, with its own calibrate, only after a mismatch"
    assert (CALIBRATE_HINT in str(failed.value)) == model_right, str(failed.value)


def test_a_broken_protocol_names_its_likely_cause() -> None:
    """Two answers that disagree may be forged, or honest code that is not repeatable: the message names both; any
    other broken protocol (an answer nobody asked for, a malformed one) is tampering."""
    from grader.judging import NOT_REPEATABLE, assert_consistent, protocol_cause
    from grader.protocol import ProtocolError

    with pytest.raises(ProtocolError) as caught:
        assert_consistent(torch.tensor([1.0]), torch.tensor([1.1]), "the loss")
    assert protocol_cause(str(caught.value)) == NOT_REPEATABLE and "random numbers" in NOT_REPEATABLE
    assert "tampered" in protocol_cause("the worker sent a message nobody asked for")


def test_an_opcheck_failure_is_said_without_the_module_path_and_with_the_hint_for_its_cause() -> None:
    """Exercise 2: opcheck's message starts with the op's module path; the learner reads what failed and the hint
    for that cause (a missing fake, an output that aliases an input), never the fake hint for an alias."""
    from grader.exercises.ex02.probes import ALIAS_HINT, FAKE_HINT
    from grader.exercises.ex02.public import opcheck_gist

    prefix = "calibrate (with implementation in <module 'torch._library.custom_ops' from '/x/custom_ops.py'>): "
    alias = opcheck_gist({"test_schema": prefix + "The output of this custom operator (1) must not also be an input "
                          "... (2) may not alias any inputs to this custom operator or other returns."})  # fmt: skip
    assert alias.startswith("calibrate: The output of this custom operator") and alias.endswith(ALIAS_HINT), alias
    fake = opcheck_gist({"test_faketensor": "There was no fake impl registered for <CustomOpDef(ex02::calibrate)>."})
    assert fake.endswith(FAKE_HINT) and ALIAS_HINT not in fake, fake
    other = opcheck_gist({"test_autograd_registration": "something else"})
    assert other == "something else", other


def test_an_inconsistent_answer_costs_its_check_and_flags_the_submission() -> None:
    """Two answers that disagree zero the check that got them, ask for a fresh worker and carry the reason the
    runner flags the submission with; any other broken protocol still propagates (it zeroes the submission)."""
    from grader.judging import assert_consistent
    from grader.protocol import ProtocolError
    from grader.registry import Check
    from grader.results import run_check

    class Learner:
        needs = check_id = None

    def disagree(learner, ctx) -> None:
        assert_consistent(torch.tensor([1.0]), torch.tensor([1.1]), "the loss")

    def malformed(learner, ctx) -> None:
        raise ProtocolError("the worker sent a message nobody asked for")

    check = Check("ex99.some.structure", "ex99", "structure", 2, False, ("f",), disagree)
    result = run_check(check, Learner(), None)
    assert not result.passed and result.points == 0 and result.replace_worker
    assert result.protocol_flag.startswith("inconsistent answers: the loss differs"), result.protocol_flag
    assert "random numbers" in result.message and "other checks still grade" in result.message, result.message
    with pytest.raises(ProtocolError):
        run_check(Check("ex99.other", "ex99", "structure", 2, False, ("f",), malformed), Learner(), None)


def test_the_score_table_gives_a_flag_its_code_cell_only_where_it_has_one() -> None:
    """A protocol flag (two answers that disagreed) has no code cell: the table says what and which check, not
    "code cell 0, line 0"; a flag of the code scan keeps its place."""
    import io

    from rich.console import Console

    from grader.report import print_table

    flags = [
        {"cell": 0, "line": 0, "kind": "protocol", "message": "ex02.scorer.no_breaks: inconsistent answers: ..."},
        {"cell": 3, "line": 2, "kind": "tamper", "message": "imports grader.probing"},
    ]
    report = {
        "score": 0, "max_score": 2, "device": "cpu", "device_name": "cpu", "profile": "smoke", "torch": "x",
        "notebooks": [{"notebook": "02_graph_breaks.ipynb", "load_problems": [], "flags": flags}],
        "checks": [{"id": "ex02.scorer.no_breaks", "exercise": "ex02", "kind": "structure", "points": 0,
                    "max_points": 2, "passed": False, "measured": None, "required": None, "message": "inconsistent"}],
    }  # fmt: skip
    out = io.StringIO()
    print_table(report, Console(file=out, width=200))
    lines = [line for line in out.getvalue().splitlines() if "flagged for review" in line]
    assert len(lines) == 2, out.getvalue()
    assert "02_graph_breaks.ipynb: ex02.scorer.no_breaks: inconsistent" in lines[0] and "code cell" not in lines[0]
    assert "code cell 3, line 2: imports grader.probing" in lines[1]
