"""Traffic attribution, fed synthetic profiler events: what a GPU's profile looks like, checked on a CPU."""

from __future__ import annotations

from types import SimpleNamespace

from coursekit.traffic import Traffic, _count_profile


def event(name: str, id: int, parent=None, linked: int = 0) -> SimpleNamespace:
    return SimpleNamespace(name=name, id=id, cpu_parent=parent, linked_correlation_id=linked)


def profile_of_a_step_with_a_custom_op() -> SimpleNamespace:
    """A custom op that copies to the host and back (its known price), then a stray ``.item()`` outside it. On a
    GPU the memcpy events and the runtime's sync have no CPU parent: only their correlation id names the op."""
    custom = event("lesson02::calibrated_gate", 1)
    inner_copy = event("aten::_to_copy", 2, parent=custom)
    item = event("aten::_local_scalar_dense", 3)
    return SimpleNamespace(
        events=lambda: [
            custom,
            inner_copy,
            event("Memcpy DtoH (Device -> Pageable)", 100, linked=2),  # launched inside the custom op
            event("cudaStreamSynchronize", 101, linked=2),
            event("Memcpy HtoD (Pageable -> Device)", 102, linked=1),
            item,
            event("cudaStreamSynchronize", 103, linked=3),  # the stray .item(): counted
            event("Memcpy DtoH (Device -> Pinned)", 104, linked=3),
        ]
    )


def test_copies_and_syncs_launched_inside_an_allowed_op_are_its_own() -> None:
    traffic = Traffic()
    _count_profile(profile_of_a_step_with_a_custom_op(), traffic, allow_inside=("lesson02::",))
    assert dict(traffic.syncs) == {
        "aten::_local_scalar_dense": 1,
        "cudaStreamSynchronize": 1,
        "Memcpy DtoH (Device -> Pinned)": 1,
    }
    assert traffic.host_tensor_count == 0


def test_without_an_allowance_everything_counts() -> None:
    traffic = Traffic()
    _count_profile(profile_of_a_step_with_a_custom_op(), traffic)
    assert traffic.sync_count == 5 and dict(traffic.host_tensors) == {"Memcpy HtoD (Pageable -> Device)": 1}


def test_data_dependent_operators_count_as_host_reads_on_the_cpu_too() -> None:
    """``torch.unique``, ``torch.bincount``, ``torch.equal`` and boolean-mask indexing wait for the device on a GPU (a
    size or a bool the host needs) but copy nothing on a CPU, where the profiler shows only the operator: each
    counts once (red team, session 19: a loss that divided by a ``bincount`` passed the CPU's traffic check)."""
    import torch

    from coursekit.traffic import watch_traffic

    x = torch.tensor([3, 1, 3, 0])
    for name, fn in {
        "aten::_unique2": lambda: torch.unique(x),
        "aten::bincount": lambda: torch.bincount(x, minlength=5),
        "aten::equal": lambda: torch.equal(x, x.flip(0)),
        "aten::masked_select": lambda: torch.masked_select(x, x > 1),
    }.items():
        with watch_traffic("cpu") as seen:
            fn()
        assert seen.sync_count == 1 and name in seen.syncs, (name, seen.summary())
    with watch_traffic("cpu") as seen:
        torch.where(x > 1, x, 0).sum()
    assert seen.sync_count == 0, seen.summary()


def test_a_host_read_nested_in_another_counts_once() -> None:
    outer = event("aten::masked_select", 1)
    profile = SimpleNamespace(events=lambda: [outer, event("aten::nonzero", 2, parent=outer)])
    traffic = Traffic()
    _count_profile(profile, traffic)
    assert dict(traffic.syncs) == {"aten::masked_select": 1}


def test_the_judges_own_copies_inside_a_watch_are_a_grader_fault() -> None:
    """A probe that copies its input to the device inside ``watch_traffic`` would charge the learner for the judge's
    host-to-device copy on a GPU (the H200 run's train_step.no_sync): ``Call.input`` refuses it, on a CPU too."""
    import pytest
    import torch

    from coursekit import traffic
    from coursekit.traffic import watch_traffic
    from grader.probing import Call, Failure

    call = Call({}, {}, {"x": torch.ones(3)}, "cpu", {})
    assert call.input("x").sum() == 3
    with watch_traffic("cpu"):
        assert traffic._open_watches[0] == 1
        with pytest.raises(Failure, match="copied its input 'x'"):
            call.input("x")
    assert traffic._open_watches[0] == 0


def test_the_summary_names_where_sync_warnings_were_raised() -> None:
    traffic = Traffic()
    traffic.syncs["cuda sync debug warning"] += 1
    traffic.sync_sites["torch/_tensor.py:123"] += 1
    assert "raised at torch/_tensor.py:123 x1" in traffic.summary()
    assert "raised at" not in Traffic().summary()
