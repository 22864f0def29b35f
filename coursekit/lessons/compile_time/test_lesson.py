"""Lesson 6's helpers and exercise 6's givens: what the lesson measures is what it says it measures."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from coursekit.lessons.compile_time.bench import markdown_table
from coursekit.lessons.compile_time.givens import make_batch, make_model, warmup_cosine
from coursekit.lessons.compile_time.material import COLD_STARTS, capture_depths, capture_plan, compile_model, lr_hygiene
from coursekit.memory import GIB
from coursekit.profile import get_profile


def test_regional_compile_keeps_keys_and_compiles_one_graph_for_every_block() -> None:
    model = make_model(0, depth=3)
    keys = list(model.state_dict())
    counter = CompileCounterWithBackend("eager")
    compiled = compile_model(model, "regional", counter)
    images, _ = make_batch(0)
    compiled(images).sum().backward()
    assert compiled is model and list(model.state_dict()) == keys
    assert counter.frame_count == 1


def test_whole_model_compile_is_one_graph_of_every_block() -> None:
    counter = CompileCounterWithBackend("eager")
    compile_model(make_model(0, depth=3), "whole", counter)(make_batch(0)[0])
    linears = sum(1 for n in counter.graphs[0].graph.nodes if "linear" in str(n.target))
    assert counter.frame_count == 1 and linears == 3 * 4 + 1  # four per block and the head


def test_a_float_learning_rate_recompiles_and_a_tensor_one_does_not() -> None:
    profile = get_profile()
    float_run = lr_hygiene(profile, "float", steps=4, backend="eager")
    tensor_run = lr_hygiene(profile, "tensor", steps=4, backend="eager")
    assert float_run.graphs[-1] > float_run.graphs[0] == 1
    assert tensor_run.graphs == [1, 1, 1, 1]
    assert tensor_run.lrs == pytest.approx(float_run.lrs)
    assert len(set(tensor_run.lrs)) == 3  # warm-up, the peak held for a step, then the decay


@pytest.mark.slow
def test_with_foreach_kernels_aot_autograd_pins_a_float_rate_so_every_new_rate_compiles() -> None:
    """Why the Inductor loop kept compiling on CUDA (where AdamW defaults to its foreach kernels) and not on a CPU (its
    loop): AOTAutograd cannot turn the float the foreach kernels take into a tensor input, so it guards on its value."""
    profile = get_profile()
    loop = lr_hygiene(profile, "float", steps=4, backend="aot_eager", foreach=False)
    kernels = lr_hygiene(profile, "float", steps=4, backend="aot_eager", foreach=True)
    assert loop.graphs == [1, 2, 2, 2]  # automatic dynamic: the rate became an input after one recompile
    # steps 2 and 3 read new rates, step 4 the same rate as step 3 (the warm-up's peak, held for a step)
    assert kernels.graphs[0] < kernels.graphs[1] < kernels.graphs[2] == kernels.graphs[3]
    assert kernels.lrs == pytest.approx(loop.lrs)


def test_fail_on_recompile_stops_the_float_loop_only() -> None:
    profile = get_profile()
    with pytest.raises(RuntimeError, match="fail_on_recompile"):
        lr_hygiene(profile, "float", steps=3, backend="eager", fail_on_recompile_after=1)
    assert lr_hygiene(profile, "tensor", steps=3, backend="eager", fail_on_recompile_after=1).graphs == [1, 1, 1]


def test_warmup_cosine_warms_up_then_decays_to_zero() -> None:
    factor = warmup_cosine(warmup=3, steps=10)
    assert [factor(s) for s in range(3)] == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert factor(3) == pytest.approx(1.0) and factor(10) == pytest.approx(0.0, abs=1e-12)
    assert all(factor(s) >= factor(s + 1) for s in range(3, 10))
    assert factor(6) == pytest.approx(0.5 * (1 + math.cos(math.pi * 3 / 7)))


def bench_doc(**changes: object) -> dict:
    """A lesson 6 results document as ``measure_lesson6`` writes it (CPU, smoke profile), with ``changes``."""
    run = {"first_step_s": 12.0, "second_step_s": 0.01, "fx_graph_hits": 0, "fx_graph_misses": 2, "aot_hits": 0}
    return {
        "device": "cpu",
        "device_name": "cpu",
        "torch": torch.__version__,
        "created": "now",
        "host": {"processor": "Test CPU", "cpu_count": 2},
        "profile": {"name": "smoke"},
        "model": {"depth": 8, "dim": 32, "heads": 2},
        "cold_starts": {name: run for name in COLD_STARTS},
        "capture": {"backend": "aot_eager", "depths": [2, 4], "whole": [1.0, 2.0], "regional": [0.5, 0.5]},
        "recompile": {
            "float": {"graphs": [1, 2], "step_s": [8.0, 7.0]},
            "tensor": {"graphs": [1, 1], "step_s": [8.0, 0.001]},
        },
        **changes,
    }


def test_bench_markdown_names_the_device_and_every_measurement() -> None:
    text = markdown_table(bench_doc())
    assert "Test CPU" in text and "smoke" in text and torch.__version__ in text
    assert all(name in text for name in COLD_STARTS) and "| 4 | 2.00 | 0.50 | 4.0x |" in text
    assert "| float | [1, 2] | 8, 7 | 15.0 |" in text


def test_capture_plan_skips_on_a_gpu_the_depths_that_do_not_fit_its_free_memory(monkeypatch) -> None:
    cpu = get_profile("full", device="cpu")
    assert capture_plan(cpu) == (capture_depths(cpu), {})  # the CPU has no memory limit to check
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (int(20 * GIB), int(24 * GIB)))
    depths, skipped = capture_plan(replace(cpu, device="cuda"))
    assert depths == [4, 8, 12] and list(skipped) == [24]  # 24 blocks need about 23 GiB with headroom
    assert "20.0 GiB free" in skipped[24]


def test_bench_markdown_lists_a_skipped_depth_with_its_reason() -> None:
    capture = {"backend": "aot_eager", "depths": [4], "whole": [1.0], "regional": [0.5], "skipped": {"24": "why"}}
    text = markdown_table(bench_doc(capture=capture))
    assert "| 4 | 1.00 | 0.50 | 2.0x |" in text and "| 24 | skipped: why | | |" in text


@pytest.mark.slow
def test_the_capture_rehearsal_times_compile_blocks_against_the_whole_model() -> None:
    """A blind learner, session 36: the capture-time check could not be tried from the kit. ``rehearse_capture``
    times a cold first step with the learner's ``compile_blocks`` against the whole model compiled."""
    from coursekit.lessons import ROOT, lesson
    from coursekit.lessons.compile_time.givens import Block
    from coursekit.lessons.compile_time.rehearse import rehearse_capture
    from grader.loader import load_notebook

    mine = load_notebook(ROOT / "solutions" / lesson("compile_time").exercise).namespace
    seen = []

    def compile_blocks(model, block_types, backend):
        seen.append((type(model).__name__, block_types, backend))
        return mine["compile_blocks"](model, block_types, backend)

    report = rehearse_capture(compile_blocks, trials=1, show=False)
    assert len(report.ratios) == 1 and report.speedup > 0
    assert seen[0][1:] == ((Block,), "aot_eager"), seen
