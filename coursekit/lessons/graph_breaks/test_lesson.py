"""Lesson 2's variants compute the same thing, break where they should, and the bench records them.

Only counts that hold from torch 2.11 on are asserted: ``.item()``, ``print`` and
``np.interp`` break the graph; whether an ``assert`` on tensor data or a loop
over ``np.arange`` does depends on the release, so no test relies on it.
No test runs Inductor: ``explain`` and ``backend="eager"`` exercise Dynamo only.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from coursekit import bench as bench_cli
from coursekit import results
from coursekit.explain import explain_counts
from coursekit.lessons.graph_breaks import bench as bench02
from coursekit.lessons.graph_breaks.material import (
    GATE_FP,
    GATE_XP,
    VARIANTS,
    BrokenNet,
    FixedNet,
    build,
    calibrated_gate,
    check_images,
    numpy_gate,
    scores_with_feature,
    scores_with_traced_feature,
)
from coursekit.profile import get_profile

TINY = dataclasses.replace(
    get_profile("smoke", "cpu"), batch_size=4, image_size=16, steps=2, warmup=1, trials=2, min_sample_s=0.001
)


def images(seed: int = 0, n: int = 4, size: int = 32) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(autouse=True)
def clean_dynamo():
    torch.compiler.reset()
    yield
    torch.compiler.reset()


@pytest.mark.parametrize("name", [*VARIANTS, "logged"])
def test_variant_matches_broken_net_values_and_gradients(name: str) -> None:
    ref, model = build("0 broken", TINY), build(name, TINY)
    assert list(model.state_dict()) == list(ref.state_dict()), "variants must share one state_dict layout"
    model.load_state_dict(ref.state_dict())
    for seed in range(2):
        x = images(seed)
        ref.zero_grad()
        model.zero_grad()
        want, got = ref(x), model(x)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        want.square().sum().backward()
        got.square().sum().backward()
        for (pname, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=f"gradient of {pname} differs")


def test_same_seed_same_weights() -> None:
    a, b = build("0 broken", TINY, seed=3), build("4 fixed", TINY, seed=3)
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p, q), name


def test_fixed_net_is_one_graph() -> None:
    counts = explain_counts(FixedNet(), images())
    assert counts["graphs"] == 1 and counts["breaks"] == 0, counts


def test_broken_net_breaks_at_item_print_and_numpy() -> None:
    counts = explain_counts(BrokenNet(), images())
    assert counts["breaks"] >= 3 and counts["graphs"] >= 4, counts
    where = " ".join(counts["reasons"])
    for line in (".item()", "print(", "np.interp("):
        assert line in where, f"no break reported at the line with {line!r}: {counts['reasons']}"


def test_compiler_disable_is_one_deliberate_break() -> None:
    counts = explain_counts(build("logged", TINY), images())
    assert counts["breaks"] == 1 and "log_activations" in counts["reasons"][0], counts


def test_fullgraph_accepts_fixed_and_rejects_broken() -> None:
    x = images()
    torch.compile(FixedNet(), backend="eager", fullgraph=True)(x)
    torch.compiler.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported):
        torch.compile(BrokenNet(), backend="eager", fullgraph=True)(x)


def test_custom_op_passes_opcheck_and_matches_numpy() -> None:
    x = 2 * torch.randn(5, 7, generator=torch.Generator().manual_seed(0))
    result = torch.library.opcheck(calibrated_gate, (x,))
    assert all(v == "SUCCESS" for v in result.values()), result
    want = np.interp(x.numpy(), GATE_XP, GATE_FP)
    np.testing.assert_allclose(calibrated_gate(x).numpy(), want, rtol=1e-6)
    torch.testing.assert_close(calibrated_gate(x), numpy_gate(x))


@pytest.mark.filterwarnings("ignore:Dynamo does not know how to trace the builtin:UserWarning")  # the break it shows
def test_nonstrict_trace_keeps_the_hashed_feature_in_one_graph_and_guards_on_its_name() -> None:
    """Lesson 2's claims: Dynamo breaks at ``zlib.crc32``; the marked helper compiles whole, trains, and a new
    feature name compiles again (its row is baked into the trace)."""
    x, table = torch.randn(4, 8), torch.randn(16, 8, requires_grad=True)
    torch.compiler.reset()
    assert explain_counts(scores_with_feature, x, table, "a")["breaks"] >= 1
    torch.compiler.reset()
    assert explain_counts(scores_with_traced_feature, x, table, "a")["breaks"] == 0
    torch.compiler.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(scores_with_traced_feature, backend=counter, fullgraph=True)
    for feature in ("user_country", "item_brand", "user_country"):
        torch.testing.assert_close(compiled(x, table, feature), scores_with_feature(x, table, feature))
    assert counter.frame_count == 2, f"two names, {counter.frame_count} compiles"
    compiled(x, table, "user_country").sum().backward()
    assert table.grad is not None and (table.grad.abs().sum(dim=1) > 0).sum() == 1
    torch.compiler.reset()


def test_check_images_rejects_bad_batches() -> None:
    check_images(images())
    bad = images()
    bad[0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        check_images(bad)
    with pytest.raises(ValueError, match="shaped"):
        check_images(torch.zeros(2, 1, 8, 8))


@pytest.fixture(scope="module")
def measured() -> dict:
    """One cheap measurement: tiny sizes, Dynamo only (``backend="eager"``)."""
    return bench02.measure_graph_breaks(TINY, backend="eager")


def test_bench02_writes_required_keys(tmp_path, measured) -> None:
    doc = bench02.results_doc(TINY, measured)
    json_path, md_path = results.write_results(doc, tmp_path, bench02.markdown_table)

    assert json_path.name == f"lesson02-smoke-cpu-torch{results.slug(torch.__version__)}.json"
    doc = json.loads(json_path.read_text())
    header = set(results.doc_header(TINY, "lesson02"))  # every results document's header, then this lesson's
    assert header | {"backend", "variants", "steps", "comparisons"} <= doc.keys()
    assert doc["lesson"] == "lesson02" and doc["backend"] == "eager"
    variants = {v["name"]: v for v in doc["variants"]}
    assert variants["4 fixed"]["breaks"] == 0 and variants["0 broken"]["breaks"] >= 3
    steps = {s["name"]: s for s in doc["steps"]}
    assert set(steps) == {"eager", "compiled broken", "compiled fixed"}
    for s in steps.values():
        assert s["step_ms"]["q1"] <= s["step_ms"]["median"] <= s["step_ms"]["q3"]
    assert steps["compiled fixed"]["graphs_compiled"] == 1 and steps["compiled broken"]["graphs_compiled"] >= 4
    assert steps["compiled fixed"]["syncs"] == 0 and steps["compiled broken"]["syncs"] >= 1
    assert [(c["baseline"], c["candidate"]) for c in doc["comparisons"]] == list(bench02.PAIRS)
    assert "| 4 fixed | 1 | 0 |" in md_path.read_text()


def test_bench_command_runs_only_the_chosen_lesson(tmp_path, measured, monkeypatch) -> None:
    monkeypatch.setattr(bench02, "measure_graph_breaks", lambda profile: measured)
    assert bench_cli.main(["--lesson", "2", "--out", str(tmp_path)]) == 0
    assert sorted(p.name.split("-")[0] + p.suffix for p in tmp_path.iterdir()) == ["lesson02.json", "lesson02.md"]
