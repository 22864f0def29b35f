"""``coursekit.practice``: the hidden structure checks' kinds, counted on the learner's own inputs."""

from __future__ import annotations

import torch

from coursekit.practice import practice


def _costly(x: torch.Tensor) -> torch.Tensor:
    weights = torch.tensor([1.0, 2.0, 3.0, 4.0])  # built on the host every call
    total = x.sum().item()  # a sync, and a graph break
    return (x * weights).sum() / total


def _clean(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).sum()


def test_practice_counts_a_break_a_recompile_a_sync_and_a_host_built_tensor(capsys) -> None:
    report = practice(_costly, [torch.randn(3, 4), torch.randn(5, 4), torch.randn(6, 4)])
    assert (report.graphs, report.breaks) == (2, 1)
    assert "item()" in report.reasons[0] and "test_practice.py" in report.reasons[0]
    assert report.frames[0] < report.frames[1] == report.frames[2] and report.recompiles > 0
    assert report.syncs == {"aten::_local_scalar_dense": 1} and report.host_tensors == {"aten::lift_fresh": 1}
    printed = capsys.readouterr().out
    assert "graphs: 2, breaks: 1" in printed and "aten::lift_fresh x1" in printed
    shown = repr(report)  # what a notebook shows below the printed report when practice(...) ends a cell
    assert "\n" not in shown and "graphs=2, breaks=1" in shown and "syncs=1, host_built_tensors=1" in shown, shown


def test_practice_finds_nothing_in_clean_code_and_runs_backward_when_asked() -> None:
    x = torch.randn(3, 4, requires_grad=True)
    report = practice(_clean, [x, torch.randn(3, 4, requires_grad=True)], backward=True, show=False)
    assert (report.graphs, report.breaks, report.frames, report.recompiles) == (1, 0, [1, 1], 0)
    assert report.syncs == {} and report.host_tensors == {}
    assert x.grad is not None and torch.equal(x.grad, torch.full_like(x, 2.0))


def test_practice_counts_the_compiles_of_a_compile_of_the_learners_own() -> None:
    """Blind learner, session 36: ``practice`` compiled with its own default options, so exercise 4's tagger
    showed an automatic-dynamic recompile that ``compile_tagger``'s static buckets never make."""
    shapes = [torch.randn(2, n) for n in (3, 5, 3, 5, 7)]
    default = practice(_clean, shapes, show=False)
    assert default.frames == [1, 2, 2, 2, 2], "automatic dynamic: one recompile, then a dynamic graph"
    used = []

    def static(fn, backend):
        used.append(backend)
        return torch.compile(fn, backend=backend, dynamic=False)

    report = practice(_clean, shapes, compile_with=static, show=False)
    assert report.frames == [1, 2, 2, 2, 3] and len(used) == 1, "one graph per shape, compiled by the caller's"
