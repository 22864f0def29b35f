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
