"""Traffic attribution, fed synthetic profiler events: what a GPU's profile looks like, checked on a CPU."""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import torch

from coursekit.traffic import Traffic, _count_profile, sync_waits

SYNC_WARNING = "called a synchronizing CUDA operation"  # what CUDA's sync debug mode says


@torch.library.custom_op("trafficprobe::gate", mutates_args=())
def _warning_gate(x: torch.Tensor) -> torch.Tensor:
    """A custom op that raises a sync-debug warning, as lesson 2's does on a GPU for its host round trip."""
    warnings.warn(SYNC_WARNING, stacklevel=1)
    return x.clone()


@_warning_gate.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


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
    traffic = Traffic(device="cuda")
    _count_profile(profile_of_a_step_with_a_custom_op(), traffic, allow_inside=("lesson02::",))
    assert dict(traffic.syncs) == {
        "aten::_local_scalar_dense": 1,
        "cudaStreamSynchronize": 1,
        "Memcpy DtoH (Device -> Pinned)": 1,
    }
    assert traffic.sync_count == 1 and traffic.host_tensor_count == 0


def test_on_torch_2_11_an_allowed_ops_copies_are_found_through_its_kernel_list() -> None:
    """Torch 2.11's events carry no ``linked_correlation_id``: a device copy names no op, and torch lists it among
    the launching op's ``kernels`` instead. The H200 run (torch 2.11) counted lesson 2's custom-op copies as the
    step's own; a stray copy of the same kind outside the op still counts."""

    def op(name: str, parent=None, kernels: tuple[str, ...] = ()) -> SimpleNamespace:
        return SimpleNamespace(name=name, id=0, cpu_parent=parent, kernels=[SimpleNamespace(name=k) for k in kernels])

    custom = op("lesson02::calibrated_gate")
    to_host = op("aten::copy_", custom, ("Memcpy DtoH (Device -> Pageable)",))
    to_device = op("aten::copy_", custom, ("Memcpy HtoD (Pageable -> Device)",))
    stray = op("aten::copy_", None, ("Memcpy DtoH (Device -> Pageable)",))
    device = [op("Memcpy DtoH (Device -> Pageable)"), op("Memcpy HtoD (Pageable -> Device)")]
    profile = SimpleNamespace(events=lambda: [custom, to_host, to_device, stray, *device, device[0]])
    traffic = Traffic(device="cuda")
    _count_profile(profile, traffic, allow_inside=("lesson02::",))
    assert dict(traffic.syncs) == {"Memcpy DtoH (Device -> Pageable)": 1} and traffic.host_tensor_count == 0
    assert traffic.sync_count == 1  # a copy into pageable memory waits, even without a runtime call
    counted = Traffic(device="cuda")
    _count_profile(profile, counted)
    assert counted.sync_count == 2 and counted.host_tensor_count == 1


def test_a_sync_warning_raised_inside_an_allowed_custom_op_is_its_own() -> None:
    """CUDA's sync-debug warnings say nothing of the op that raised them: the H200 run counted the two that lesson 2's
    custom op raises for its host round trip. ``watch_traffic`` now asks, when a warning is raised, whether an allowed
    ``torch.library.custom_op`` is running (eager and compiled); one raised outside it still counts."""
    from coursekit.traffic import watch_traffic

    def step(x: torch.Tensor) -> torch.Tensor:
        return _warning_gate(x) * 2

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    with warnings.catch_warnings(action="ignore"):  # the compiling call, watched by nothing
        compiled(torch.ones(3))
    for fn in (step, compiled):
        with watch_traffic("cpu", allow_inside=("trafficprobe::",), host_reads=False) as inside:
            fn(torch.ones(3))
        with watch_traffic("cpu", allow_inside=("trafficprobe::",), host_reads=False) as outside:
            fn(torch.ones(3))
            warnings.warn(SYNC_WARNING, stacklevel=1)
        with watch_traffic("cpu", host_reads=False) as unallowed:
            fn(torch.ones(3))
        assert inside.sync_count == 0, inside.summary()
        assert outside.syncs["cuda sync debug warning"] == 1, outside.summary()
        assert unallowed.syncs["cuda sync debug warning"] == 1, unallowed.summary()


def test_without_an_allowance_everything_counts() -> None:
    traffic = Traffic(device="cuda")
    _count_profile(profile_of_a_step_with_a_custom_op(), traffic)
    assert sum(traffic.syncs.values()) == 5  # two waits (the op's own, the stray .item()), five events
    assert traffic.sync_count == 2 and dict(traffic.host_tensors) == {"Memcpy HtoD (Pageable -> Device)": 1}


def test_a_sync_seen_in_several_views_counts_once() -> None:
    """Lesson 1's rung 0 on the H200 (torch 2.11): three waits (a pageable copy of the weights, the assert's read, a
    pageable copy of the ``range`` index), listed as eight events, and two host-built tensors listed as four. Its
    table said 8 syncs and 4 host-built tensors; it now says 3 and 2."""
    traffic = Traffic(device="cuda")
    traffic.syncs.update(
        {
            "cudaStreamSynchronize": 3,
            "cuda sync debug warning": 3,
            "aten::_local_scalar_dense": 1,
            "Memcpy DtoH (Device -> Pinned)": 1,
        }
    )
    traffic.host_tensors.update({"aten::lift_fresh": 2, "Memcpy HtoD (Pageable -> Device)": 2})
    assert traffic.sync_count == 3 and traffic.host_tensor_count == 2
    assert traffic.summary().startswith("device->host syncs: 3 (events: cudaStreamSynchronize x3, ")
    assert "host-built tensors / H2D copies: 2 (events: aten::lift_fresh x2, Memcpy HtoD" in traffic.summary()
    on_a_cpu = Traffic()
    on_a_cpu.syncs.update({"aten::_local_scalar_dense": 2, "Tensor.tolist": 1})  # nothing waits: every read counts
    assert on_a_cpu.sync_count == 3 and Traffic().sync_count == 0 and "syncs: none;" in Traffic().summary()


def test_on_cuda_a_read_of_a_cpu_tensor_is_no_wait() -> None:
    """Lesson 2's broken step on the H200 (torch 2.11) listed 11 ``_local_scalar_dense`` for 7 runtime waits and 7
    sync-debug warnings: reads of CPU tensors wait for nothing. On CUDA they are evidence, not a count."""
    traffic = Traffic(device="cuda:0")
    traffic.syncs.update({"aten::_local_scalar_dense": 11, "cudaStreamSynchronize": 7, "cuda sync debug warning": 7})
    assert traffic.sync_count == 7 and sync_waits(traffic.syncs, "cpu") == 11
    assert sync_waits({"aten::_local_scalar_dense": 1}, torch.device("cuda")) == 0


def test_a_non_blocking_copy_to_the_host_is_no_sync() -> None:
    """A ``non_blocking`` copy into pinned memory (logging without waiting) should show on CUDA as a ``Memcpy DtoH``
    with no runtime wait and no sync-debug warning (PyTorch's copy kernel records an event instead of synchronising;
    not yet watched on a GPU: `make gpu-check`'s env step records it). It used to count as a sync, so exercise 1's
    ``train_step.no_sync`` would have failed a step that copies its loss that way on a GPU (to read once an event
    says it arrived). A copy into pageable memory waits, non_blocking or not, and still counts."""
    traffic = Traffic(device="cuda")
    traffic.syncs["Memcpy DtoH (Device -> Pinned)"] += 1
    assert traffic.sync_count == 0 and traffic.summary().startswith("device->host syncs: 0 (events: Memcpy DtoH")
    traffic.syncs.update({"cudaStreamSynchronize": 1, "cuda sync debug warning": 1})  # a blocking one
    assert traffic.sync_count == 1
    assert sync_waits({"Memcpy DtoH (Device -> Pageable)": 1}, "cuda") == 1


def test_data_dependent_operators_count_as_host_reads_on_the_cpu_too() -> None:
    """``torch.unique``, ``torch.bincount``, ``torch.equal`` and boolean-mask indexing wait for the device on a GPU (a
    size or a bool the host needs) but copy nothing on a CPU, where the profiler shows only the operator: each
    counts once (red team, session 19: a loss that divided by a ``bincount`` passed the CPU's traffic check)."""

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


class _ModuleThatBreaks(torch.nn.Module):
    """A ``.item()`` into an attribute (a graph break), then a sync warning raised in the eager stretch after it."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.stats: dict[str, float] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.lin(x)
        self.stats["mean"] = x.mean().item()
        warnings.warn(SYNC_WARNING, stacklevel=1)  # the line the count must name
        return self.lin(x).relu()


def test_a_sync_warning_in_a_compiled_modules_eager_stretch_counts_and_compiles_nothing_of_ours() -> None:
    """On the H200 (torch 2.11) lesson 2 stopped with Dynamo's "UnspecializedNNModuleVariable(BrokenNet) is already
    tracked for mutation": a sync warning raised between two graphs of a compiled module called the watch's
    warning hook inside Dynamo's reach, and Dynamo traced its walk up the stack. The hook is
    ``torch.compiler.disable``d now; the warning counts once, at the module's line (the next test shows that a
    warning naming the watch's own frame is charged to the line below it)."""
    import inspect

    from coursekit.traffic import watch_traffic

    torch.compiler.reset()
    model = torch.compile(_ModuleThatBreaks(), backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Dynamo's own graph-break warning is not the point
        with watch_traffic("cpu", allow_inside=("trafficprobe::",)) as seen:
            model(torch.randn(2, 4)).sum().backward()
    source, first = inspect.getsourcelines(_ModuleThatBreaks.forward)
    line = first + next(i for i, text in enumerate(source) if "the line the count must name" in text)
    assert seen.syncs["cuda sync debug warning"] == 1, seen.summary()
    assert dict(seen.sync_sites) == {f"tests/test_traffic.py:{line}": 1}, seen.summary()


def test_a_sync_warning_that_names_the_watchs_own_frame_is_charged_to_the_code_below_it() -> None:
    """Torch's C++ names the innermost Python frame when it warns: on the H200 run that was the watch's host-read mode
    (``coursekit/traffic.py:92``) for every sync. Emulated here with a warning that names that frame; the count must
    name the line that called it."""
    from coursekit import traffic
    from coursekit.traffic import watch_traffic

    with watch_traffic("cpu", host_reads=False) as seen:
        warnings.warn_explicit(SYNC_WARNING, UserWarning, traffic.__file__, 92)  # the line the count must name
    source = Path(__file__).read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if "traffic.__file__, 92)" in text)
    assert dict(seen.sync_sites) == {f"tests/test_traffic.py:{line}": 1}, seen.summary()


def test_a_sync_warning_raised_in_inductors_generated_code_is_named_as_such(tmp_path, monkeypatch) -> None:
    """On the H200 run lesson 2 charged two syncs to ``x4/cx4rxxyah4c6….py:51``: a module Inductor generated in its
    cache folder, which a reader cannot find by that name. Emulated with a module compiled from a file in a stand-in
    cache folder; the count must say it is Inductor's output code."""
    from coursekit.traffic import watch_traffic

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    generated = tmp_path / "x4" / "cx4rxxyah4c6dki2yora5xzsldohipuct54yuvcong3jtj53j7a6.py"
    generated.parent.mkdir()
    generated.write_text("import warnings\ndef call(message):\n    warnings.warn(message, stacklevel=1)\n")
    namespace: dict = {}
    exec(compile(generated.read_text(), str(generated), "exec"), namespace)
    with watch_traffic("cpu", host_reads=False) as seen:
        namespace["call"](SYNC_WARNING)
    assert dict(seen.sync_sites) == {"Inductor output code cx4rxxyah…:3": 1}, seen.summary()
