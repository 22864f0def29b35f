"""Lesson 1's ladder: every rung computes the same loss, and the traffic checks see what they should."""

from __future__ import annotations

import dataclasses
import functools
import json

import pytest
import torch
import torch.nn.functional as F

from coursekit import results
from coursekit.lessons.cross_entropy import bench
from coursekit.lessons.cross_entropy.material import CLASS_WEIGHT, LADDER, NUM_CLASSES, build
from coursekit.lessons.cross_entropy.vocab import handwritten_cross_entropy, inductor_kernels, vocab_shape
from coursekit.profile import get_profile
from coursekit.traffic import watch_traffic

EAGER_RUNGS = [name for name in LADDER if "compiled" not in name]
COMPILED_RUNGS = [name for name in LADDER if "compiled" in name]


def reference(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, labels, weight=torch.full((NUM_CLASSES,), CLASS_WEIGHT))


def assert_matches_reference(loss_fn, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(37, NUM_CLASSES, generator=gen)).requires_grad_()
    labels = torch.randint(0, NUM_CLASSES, (37,), generator=gen)
    ref_logits = logits.detach().clone().requires_grad_()
    got, want = loss_fn(logits, labels), reference(ref_logits, labels)
    got.backward()
    want.backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg="loss value differs from F.cross_entropy")
    torch.testing.assert_close(
        logits.grad, ref_logits.grad, rtol=1e-5, atol=1e-6, msg="gradient differs from F.cross_entropy's"
    )


@pytest.mark.parametrize("name", EAGER_RUNGS)
def test_eager_rung_equals_cross_entropy(name: str) -> None:
    loss_fn = build(name, "cpu")
    for seed in range(3):
        assert_matches_reference(loss_fn, seed)


@pytest.mark.parametrize("name", COMPILED_RUNGS)
def test_compiled_rung_traces_to_cross_entropy(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dynamo captures the rung in one graph (``fullgraph=True``); ``aot_eager`` skips code generation."""
    torch.compiler.reset()
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    try:
        loss_fn = build(name, "cpu")
        for seed in range(2):
            assert_matches_reference(loss_fn, seed)
    finally:
        torch.compiler.reset()


def traffic_of(name: str):
    loss_fn = build(name, "cpu")
    logits = torch.randn(16, NUM_CLASSES, requires_grad=True)
    labels = torch.randint(0, NUM_CLASSES, (16,))
    with watch_traffic("cpu") as traffic:
        loss_fn(logits, labels).backward()
    return traffic


def test_rung0_shows_sync_and_host_built_tensors() -> None:
    traffic = traffic_of("0 naive")
    assert traffic.sync_count >= 1, f"the assert on target.max() should sync: {traffic.summary()}"
    assert traffic.host_tensor_count >= 2, f"weights and range should be host-built: {traffic.summary()}"


def test_rung3_shows_no_traffic() -> None:
    traffic = traffic_of("3 arange")
    assert traffic.sync_count == 0 and traffic.host_tensor_count == 0, traffic.summary()


def test_bench_writes_required_keys(tmp_path) -> None:
    tiny = dataclasses.replace(get_profile("smoke", "cpu"), batch_size=8, image_size=8, steps=2, warmup=1)
    rows = bench.measure_ladder(tiny, ["0 naive", "3 arange"], progress=False)
    json_path, md_path = results.write_results(bench.results_doc(tiny, rows), tmp_path, bench.markdown_table)

    assert json_path.name == f"lesson01-smoke-cpu-torch{results.slug(torch.__version__)}.json"
    doc = json.loads(json_path.read_text())
    assert set(results.doc_header(tiny, "lesson01")) | {"rungs"} <= doc.keys()
    assert doc["profile"]["name"] == "smoke"
    assert [r["name"] for r in doc["rungs"]] == ["0 naive", "3 arange"]
    for rung in doc["rungs"]:
        assert {"name", "step_ms", "loss_us", "step_speedup", "loss_speedup", "syncs", "host_tensors"} <= rung.keys()
        for key in ("step_ms", "loss_us"):
            assert rung[key]["q1"] <= rung[key]["median"] <= rung[key]["q3"]
    assert doc["rungs"][0]["step_speedup"] == 1.0
    assert doc["rungs"][0]["syncs"] >= 1 and doc["rungs"][1]["syncs"] == 0
    assert "| 3 arange |" in md_path.read_text()
    assert "large_vocab" not in doc  # measured only when asked for


def test_bench_records_the_large_vocabulary_rung_with_its_shape() -> None:
    tiny = dataclasses.replace(get_profile("smoke", "cpu"), batch_size=8, image_size=8, steps=2, warmup=1)
    rows = [{"variant": "eager built-in", "ms": 2.0, "peak_mib": 48.0, "peak_in_logits": 3.0}]
    doc = bench.results_doc(tiny, bench.measure_ladder(tiny, ["3 arange"], progress=False), rows)
    assert doc["large_vocab"] == {"tokens": vocab_shape(tiny)[0], "classes": vocab_shape(tiny)[1], "variants": rows}
    assert "| eager built-in | 2 | 48 | 3.00 |" in bench.markdown_table(doc)


def test_handwritten_large_vocabulary_loss_equals_cross_entropy() -> None:
    logits = (8 * torch.randn(6, 5000)).requires_grad_()  # large logits: a naive log-softmax would overflow exp()
    targets = torch.randint(0, 5000, (6,))
    ref = logits.detach().clone().requires_grad_()
    got, want = handwritten_cross_entropy(logits, targets), F.cross_entropy(ref, targets)
    got.backward()
    want.backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(logits.grad, ref.grad)


def test_vocab_sizes_come_from_the_manifest_for_every_profile() -> None:
    for name in ("smoke", "full"):
        tokens, classes = vocab_shape(get_profile(name, "cpu"))
        assert tokens > 0 and classes >= 32768, f"{name}: the last rung is about a large vocabulary, got {classes}"


@pytest.mark.slow
def test_inductor_kernels_are_listed_only_when_the_kernel_profile_was_on() -> None:
    """The lesson's claim: without ``cpp.enable_kernel_profile`` a CPU profile shows no Inductor kernel by name."""
    logits, targets = torch.randn(4, 64, requires_grad=True), torch.randint(0, 64, (4,))
    found = {}
    for on in (False, True):
        torch.compiler.reset()
        with torch._inductor.config.patch({"cpp.enable_kernel_profile": on, "fx_graph_cache": False}):
            loss = torch.compile(handwritten_cross_entropy, fullgraph=True)
            loss(logits, targets).backward()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            loss(logits, targets).backward()
        found[on] = inductor_kernels(prof)
    torch.compiler.reset()
    assert not found[False], f"kernels listed with the kernel profile off: {found[False]}"
    assert any("logsumexp" in name for name, _, _ in found[True]), f"no forward kernel named: {found[True]}"
    assert all(calls == 1 and us > 0 for _, calls, us in found[True]), found[True]


def test_a_triton_kernel_is_listed_once_with_its_device_time() -> None:
    """A CUDA profile holds each Triton kernel twice under one name, the CPU-side launch and the kernel on the device:
    the H200 run listed every kernel twice. Only the device's record stays (synthetic events: no GPU here)."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    def avg(key: str, device: DeviceType, device_us: float, cpu_us: float = 0.0) -> SimpleNamespace:
        return SimpleNamespace(key=key, count=1, device_type=device, self_device_time_total=device_us,
                               self_cpu_time_total=cpu_us)  # fmt: skip

    events = [
        avg("triton_red_fused_logsumexp_0", DeviceType.CPU, 0.0, 12.0),
        avg("triton_red_fused_logsumexp_0", DeviceType.CUDA, 467.0),
        avg("aten::mm", DeviceType.CPU, 0.0, 5.0),
        avg("triton_poi_fused_neg_1", DeviceType.CUDA, 4.0),
        avg("graph_0_cpp_fused_sum_0", DeviceType.CPU, 0.0, 9.0),
    ]
    prof = SimpleNamespace(key_averages=lambda: events)
    assert inductor_kernels(prof) == [
        ("triton_red_fused_logsumexp_0", 1, 467.0),
        ("triton_poi_fused_neg_1", 1, 4.0),
        ("graph_0_cpp_fused_sum_0", 1, 9.0),
    ]
