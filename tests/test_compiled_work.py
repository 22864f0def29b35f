"""A timed sample must run its work in compiled graphs: a function compiled for the calls before timing and eager
while timed is caught (red team, session 37)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from grader.probing import compiled_work, graph_runs, linear_calls
from grader.speed import check_work


def test_compiled_work_counts_each_call_of_a_graph_by_its_weight() -> None:
    torch.compiler.reset()
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    counter = graph_runs("eager", detail=False)
    compiled = torch.compile(model, backend=counter)
    work = compiled_work(counter, linear_calls)
    x = torch.randn(3, 4)
    compiled(x)
    assert work() == 2  # one call of a graph that holds two linear layers
    before = work()
    for _ in range(3):
        compiled(x)
    assert work() - before == 6
    for _ in range(3):  # the same model, eagerly: no compiled work
        model(x)
    assert work() - before == 6
    torch.compiler.reset()


def test_a_sample_short_of_compiled_work_fails_with_what_to_fix() -> None:
    check_work(44, 2, 22, "linear layers")
    with pytest.raises(AssertionError, match="ran 22 linear layers, where each call runs 22 .44 in all.: part of"):
        check_work(22, 2, 22, "linear layers")
    with pytest.raises(AssertionError, match="call the compiled function on every call"):
        check_work(0, 16, 1, "calls of a graph that holds the loss")


def test_only_torch_own_calls_count_as_compiled_work() -> None:
    """A custom op named like a linear layer, or a function of the learner's let into the graph under a loss's name,
    runs code the graph does not show: it is no linear layer or loss, and ``foreign_calls`` names it (red team,
    session 47: an eager optimizer step hidden in a custom op named ``addc_step``)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    from grader.probing import foreign_calls, op_calls

    @torch.library.custom_op("coursekit_test::linear_like", mutates_args=())
    def linear_like(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x @ w.t()

    linear_like.register_fake(lambda x, w: x.new_empty(x.shape[0], w.shape[0]))

    def log_softmax(x: torch.Tensor) -> torch.Tensor:  # the learner's, eager inside the graph
        return x - x.exp().sum(-1, keepdim=True).log()

    torch.compiler.reset()
    layer = nn.Linear(4, 2)
    counter = CompileCounterWithBackend("eager")
    hidden = torch._dynamo.allow_in_graph(log_softmax)
    out = torch.compile(lambda x: hidden(linear_like(x, layer.weight)), backend=counter)(torch.randn(3, 4))
    honest = torch.compile(lambda x: torch.log_softmax(layer(x), -1), backend=counter)(torch.randn(3, 4))
    assert out.shape == honest.shape == (3, 2) and len(counter.graphs) == 2
    cheat, fair = counter.graphs
    assert linear_calls(cheat) == 0 and op_calls(cheat, ("log_softmax",)) == 0
    assert any("linear_like" in name for name in foreign_calls(cheat)), foreign_calls(cheat)
    assert any("log_softmax" in name for name in foreign_calls(cheat)), foreign_calls(cheat)
    assert linear_calls(fair) == 1 and op_calls(fair, ("log_softmax",)) == 1 and foreign_calls(fair) == []
    torch.compiler.reset()


def test_an_answer_counts_as_compiled_only_when_the_last_graph_made_it_from_the_real_inputs() -> None:
    """``GraphRuns.returned``: the compiled model's own output counts; an eager output beside a graph run on a slice,
    or a graph that was handed the eager answer to pass through, does not (red team, session 47)."""
    from grader.probing import module_tensors

    torch.compiler.reset()
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    counter = graph_runs("eager", detail=False)
    x = torch.randn(3, 4)
    allowed = module_tensors(model) | {x.data_ptr()}
    with torch.no_grad():
        out = torch.compile(model, backend=counter)(x)
        assert counter.returned(out, linear_calls, allowed)
        slice_graph = torch.compile(lambda t: model(t[:1]), backend=counter)
        slice_graph(x)
        eager = model(x)
        assert not counter.returned(eager, linear_calls, allowed), "an eager answer beside a graph on a slice"
        relay = torch.compile(lambda t, answer: model(t[:1]).sum() * 0 + answer, backend=counter)
        relayed = relay(x, eager)
        assert not counter.returned(relayed, linear_calls, allowed), "a graph handed the eager answer"
        token = torch.compile(lambda t: t * 2, backend=counter)
        assert not counter.returned(token(x), linear_calls, allowed), "a graph that holds no linear layer"
    torch.compiler.reset()


def test_exercise_4s_stream_counts_a_batch_only_when_the_compiled_graph_made_its_output() -> None:
    """``run_batches``: the compiled tagger's own outputs count; outputs of the model run eagerly beside a graph on a
    slice, or a stream that changes the tagger's own tensors (which could carry an answer), count as eager."""
    from grader.exercises.ex04.probes import run_batches
    from grader.probing import Call

    class Tagger(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.hidden, self.head = nn.Embedding(50, 8), nn.Linear(8, 8), nn.Linear(8, 3)
            self.register_buffer("carry", torch.zeros(()))

        def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return self.head(torch.relu(self.hidden(self.embed(tokens))).mean(1))

    def collate(seqs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.stack(seqs), torch.ones(len(seqs), len(seqs[0]), dtype=torch.bool)

    names = ["b0", "b1", "b2"]
    inputs = {f"{n}.{i}": torch.randint(1, 50, (5 + k,)) for k, n in enumerate(names) for i in range(2)}
    call = Call({"collate": collate}, {"rows": dict.fromkeys(names, 2), "tagger_linears": 2}, inputs, "cpu", {})
    model = Tagger()

    def stream(make) -> list[str]:
        torch.compiler.reset()
        counter = graph_runs("eager")
        return run_batches(call, make(counter), names, counter, model)[1]

    assert stream(lambda c: torch.compile(model, backend=c)) == []

    def beside_a_slice(c):
        graph = torch.compile(lambda t, m: model(t[:1, :2], m[:1, :2]), backend=c)
        return lambda t, m: (graph(t, m), model(t, m))[1]

    assert stream(beside_a_slice) == names

    def carrying(c):
        compiled = torch.compile(model, backend=c)
        return lambda t, m: (compiled(t, m), model.carry.add_(1))[0]

    assert stream(carrying) == names
    torch.compiler.reset()


def test_exercise_2s_graph_may_call_only_calibrate_once_on_one_number_per_row() -> None:
    """``ex02.probes.outside_torch``: calibrate on the top scores passes (a ``keepdim`` column too); calibrate called
    twice, calibrate handed the rows, and any other custom op are named (red team, session 47; session 48)."""
    from grader.exercises.ex02.probes import outside_torch

    @torch.library.custom_op("coursekit_test::calibrate", mutates_args=())
    def calibrate(top: torch.Tensor) -> torch.Tensor:
        return top.sigmoid()

    calibrate.register_fake(lambda top: torch.empty_like(top))

    @torch.library.custom_op("coursekit_test::other", mutates_args=())
    def other(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    other.register_fake(lambda x: torch.empty_like(x))
    head = nn.Linear(4, 3)
    forwards = {
        "taught": lambda x: head(x) * calibrate(head(x).detach().amax(-1)).unsqueeze(-1),
        "keepdim": lambda x: head(x) * calibrate(head(x).detach().amax(-1, keepdim=True)),
        "twice": lambda x: head(x) * calibrate(head(x).amax(-1)).unsqueeze(-1) * calibrate(x[:, 0]).unsqueeze(-1),
        "rows": lambda x: head(x) + calibrate(x).sum(-1, keepdim=True),
        "other op": lambda x: other(head(x)),
    }
    found = {}
    for name, forward in forwards.items():
        torch.compiler.reset()
        counter = graph_runs("eager", detail=False)
        torch.compile(forward, backend=counter, fullgraph=True)(torch.randn(5, 4))
        found[name] = outside_torch(counter.graphs, calibrate, 5)
    assert found["taught"] == found["keepdim"] == [], found
    assert found["twice"] == ["calibrate a 2nd time"], found
    assert found["rows"] == ["calibrate on (5, 4), returning (5, 4)"], found
    assert found["other op"] == ["coursekit_test::other"], found
    torch.compiler.reset()


def test_exercise_2s_forward_may_change_only_its_statistic_and_read_only_its_rows_and_weights() -> None:
    """``ex02.probes.watched_call`` and ``stray_reads``: an answer written into a buffer of the model by a custom op
    that says it mutates nothing, or read from a global of the learner's, is named; the one-number statistic a
    forward updates is not (red team, session 48)."""
    from grader.exercises.ex02.probes import stray_reads, watched_call

    scratch = torch.zeros(8, 3)

    class Scorer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = nn.Linear(4, 3)
            self.register_buffer("mean_activation", torch.zeros(()))
            self.register_buffer("_scratch", torch.zeros(8, 3))

        def forward(self, x: torch.Tensor, how: str = "honest") -> torch.Tensor:
            out = self.head(x)
            with torch.no_grad():
                self.mean_activation.copy_(out.mean())
            if how == "buffer":
                with torch.no_grad():
                    self._scratch[: x.shape[0]].copy_(out * 2)
                return self._scratch[: x.shape[0]] + 0.0 * out
            return out + scratch[: x.shape[0]] if how == "global" else out

    model, x = Scorer(), torch.randn(5, 4)
    found = {}
    for how in ("honest", "buffer", "global"):
        torch.compiler.reset()
        counter = graph_runs("eager")
        compiled = torch.compile(lambda x, how=how: model(x, how), backend=counter)
        strays: list[str] = []
        watched_call(compiled, model, x, "the scorer", strays)
        found[how] = strays + stray_reads(counter, model, [x])
    assert found["honest"] == [], found
    assert found["buffer"] == ["changes _scratch"], found
    assert found["global"] == ["reads 1 tensor(s) that are neither the rows nor the model's own"], found
    torch.compiler.reset()
