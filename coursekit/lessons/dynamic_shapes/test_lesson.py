"""Lesson 4's model, collates and scalar-guard variants behave as the lesson says, and the bench records them.

No test runs Inductor: ``CompileCounter`` and ``backend="eager"`` exercise Dynamo only, which is
where recompiles are decided.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from torch._dynamo.testing import CompileCounter

from coursekit import bench as bench_cli
from coursekit import results
from coursekit.lessons import lesson
from coursekit.lessons.dynamic_shapes import bench as bench04
from coursekit.lessons.dynamic_shapes.material import (
    BUCKETS,
    MAX_LEN,
    MIN_LEN,
    PAD,
    VARIANTS,
    bucket_for,
    build,
    length_stream,
    pad_to_bucket,
    pad_to_longest,
    sequences,
)
from coursekit.profile import get_profile

TINY = dataclasses.replace(get_profile("smoke", "cpu"), warmup=1, trials=2, min_sample_s=0.001)
LENGTHS = (5, 9, 14, 23, 31)


@pytest.fixture(autouse=True)
def clean_dynamo():
    torch.compiler.reset()
    yield
    torch.compiler.reset()


def batch(length: int, rows: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    return pad_to_longest(sequences([length] * rows, seed))


def test_length_stream_is_seeded_and_bounded() -> None:
    a, b = length_stream(12, 4, seed=1), length_stream(12, 4, seed=1)
    assert a == b and a != length_stream(12, 4, seed=2)
    assert all(len(step) == 4 and MIN_LEN <= min(step) and max(step) <= MAX_LEN for step in a)


def test_bucket_collate_pads_to_few_shapes() -> None:
    assert [bucket_for(n) for n in (1, 16, 17, 64)] == [16, 16, 32, 64]
    with pytest.raises(ValueError):
        bucket_for(MAX_LEN + 1)
    shapes = {pad_to_bucket(sequences(step, i))[0].shape[1] for i, step in enumerate(length_stream(30, 4, 0))}
    assert shapes <= set(BUCKETS)
    tokens, lengths = pad_to_bucket(sequences([3, 7], 0))
    assert tokens.shape == (2, 16) and lengths.tolist() == [3, 7] and (tokens[0, 3:] == PAD).all()


@pytest.mark.parametrize("collate", [pad_to_bucket, pad_to_longest])
def test_padded_masked_batch_equals_each_sequence_alone(collate) -> None:
    model = build()
    seqs = sequences([2, 5, 11, 16, 30], seed=3)
    with torch.no_grad():
        padded = model(*collate(seqs))
        alone = torch.cat([model(s[None], torch.tensor([len(s)])) for s in seqs])
    torch.testing.assert_close(padded, alone, rtol=1e-5, atol=1e-6)


def test_variants_share_weights_and_state_dict() -> None:
    ref = build("plain", seed=1).state_dict()
    for name in VARIANTS:
        sd = build(name, seed=1).state_dict()
        assert list(sd) == list(ref), name
        assert all(torch.equal(sd[k], ref[k]) for k in ref), name


def frames_over(model: torch.nn.Module, calls: int, before_call=None) -> list[int]:
    counter = CompileCounter()
    compiled = torch.compile(model, backend=counter)
    frames = []
    with torch.no_grad():
        for i in range(calls):
            if before_call:
                before_call(i)
            compiled(*batch(8))
            frames.append(counter.frame_count)
    return frames


def test_int_counter_recompiles_every_call_and_buffer_compiles_once() -> None:
    calls = 5
    assert frames_over(build("int counter"), calls) == list(range(1, calls + 1))
    torch.compiler.reset()
    fixed = build("tensor buffer")
    assert frames_over(fixed, calls) == [1] * calls
    assert int(fixed.step) == calls, "the buffer counts calls inside the compiled graph"


def test_float_attribute_recompiles_once_then_is_dynamic() -> None:
    model = build("float attribute")
    frames = frames_over(model, 5, lambda i: setattr(model, "alpha", (i + 1) / 100))
    assert frames == [1, 2, 2, 2, 2]


def test_mark_dynamic_with_bounds_compiles_once_and_enforces_them() -> None:
    counter = CompileCounter()
    compiled = torch.compile(build(), backend=counter)
    with torch.no_grad():
        for n in LENGTHS:
            tokens, lengths = batch(n)
            torch._dynamo.mark_dynamic(tokens, 1, min=MIN_LEN, max=MAX_LEN)
            compiled(tokens, lengths)
        assert counter.frame_count == 1
        tokens, lengths = batch(MAX_LEN + 6)
        torch._dynamo.mark_dynamic(tokens, 1, min=MIN_LEN, max=MAX_LEN)
        with pytest.raises(Exception, match="not in range"):
            compiled(tokens, lengths)


def test_automatic_dynamic_after_one_recompile() -> None:
    counter = CompileCounter()
    compiled = torch.compile(build(), backend=counter)
    frames = []
    with torch.no_grad():
        for n in LENGTHS:
            compiled(*batch(n))
            frames.append(counter.frame_count)
    assert frames == [1, 2, 2, 2, 2]


@pytest.fixture(scope="module")
def measured() -> dict:
    """One cheap measurement: Dynamo only, a short stream, and a recompile limit of 3 so ``static`` hits it."""
    with torch._dynamo.config.patch(recompile_limit=3):
        return bench04.measure_dynamic_shapes(TINY, backend="eager", steps=8, batch=3)


def test_measurement_counts_compiles_and_fallbacks(measured) -> None:
    rows = {r["name"]: r for r in measured["strategies"]}
    assert list(rows) == [s.name for s in bench04.STRATEGIES]
    assert measured["stream"]["distinct_lengths"] > 3
    static = rows["static"]
    assert static["frames"] == 3 and static["recompile_limit_hit"] and static["eager_fallback_calls"] >= 1
    compiled_lengths = {p["length"] for p in static["timeline"] if p["ran_compiled"]}
    assert len(compiled_lengths) == 3, "past the limit, only the lengths compiled before it run compiled code"
    assert all(p["length"] not in compiled_lengths for p in static["timeline"] if not p["ran_compiled"])
    assert rows["automatic dynamic"]["frames"] == 2 and rows["mark_dynamic"]["frames"] == 1
    assert rows["buckets"]["frames"] == rows["buckets"]["shapes"] <= len(BUCKETS)
    assert rows["eager"]["frames"] == 0 and not rows["eager"]["recompile_limit_hit"]
    for r in rows.values():
        assert len(r["timeline"]) == 8 and all({"steady_ms", "eager_steady_ms"} <= p.keys() for p in r["timeline"])
        assert r["pass_ms"]["q1"] <= r["pass_ms"]["median"] <= r["pass_ms"]["q3"]


def test_bench04_writes_required_keys(tmp_path, measured) -> None:
    doc = bench04.results_doc(TINY, measured)
    json_path, md_path = results.write_results(doc, tmp_path, bench04.markdown_table)
    assert json_path.name == f"lesson04-smoke-cpu-torch{results.slug(torch.__version__)}.json"
    doc = json.loads(json_path.read_text())
    header = set(results.doc_header(TINY, "lesson04"))  # every results document's header, then this lesson's
    assert header | {"backend", "recompile_limit", "compile_cache", "stream", "strategies"} <= doc.keys()
    assert doc["lesson"] == "lesson04" and doc["backend"] == "eager"
    for r in doc["strategies"]:
        assert {
            "name",
            "how",
            "frames",
            "graphs",
            "timeline",
            "stream_ms",
            "first_call_ms",
            "pass_ms",
            "tokens_per_s",
            "recompile_limit_hit",
            "eager_fallback_calls",
            "padding",
        } <= r.keys()
    assert "| static |" in md_path.read_text() and "| buckets |" in md_path.read_text()
    compiled = [r for r in doc["strategies"] if r["compiled"]]  # each ratio names the eager time it compares with
    assert compiled and all("eager_pass_ms" in r for r in compiled)
    assert md_path.read_text().count("ms in the same trials") == len(compiled)


@pytest.fixture(scope="module")
def packing() -> dict:
    """``measure_packing`` with Dynamo only, over a short stream."""
    return bench04.measure_packing(TINY, backend="eager", steps=4)


def test_bench_command_runs_lesson_4(tmp_path, measured, packing, monkeypatch) -> None:
    monkeypatch.setattr(bench04, "measure_dynamic_shapes", lambda profile: measured)
    monkeypatch.setattr(bench04, "measure_packing", lambda profile: packing)
    assert bench_cli.main(["--lesson", "4", "--out", str(tmp_path)]) == 0
    assert sorted(p.name.split("-")[0] + p.suffix for p in tmp_path.iterdir()) == ["lesson04.json", "lesson04.md"]
    md = next(tmp_path.glob("*.md")).read_text()
    assert "| packed into rows of 64 |" in md and "packed vs buckets" in md


def test_exercise_4_states_the_hidden_stream_it_is_graded_on() -> None:
    """The exercise tells learners what its hidden checks feed them (how many batches, rows, what is timed)."""
    from pathlib import Path

    from grader.exercises.ex04 import contract, hidden

    text = (Path(__file__).resolve().parents[3] / "solutions" / contract.NOTEBOOK).read_text()
    assert f"A stream of {hidden.STREAM_BATCHES} batches" in text and "compiles included" in text
    assert f"`{hidden.STREAM_BACKEND}`" in text


def _repeated_sequence(streams: list[dict]) -> str | None:
    """The first batch (``"trial 2, stream03"``) holding a sequence an earlier stream or batch already held."""
    seen: set[bytes] = set()
    for t, stream in enumerate(streams):
        for name, seqs in stream.items():
            for seq in seqs:
                key = seq.numpy().tobytes()
                if key in seen:
                    return f"trial {t}, {name}"
                seen.add(key)
    return None


def test_exercise_4_times_every_trial_on_sequences_no_other_stream_held() -> None:
    """Exercise 4's speed check gives each timed trial a stream of its own: a compile_tagger that remembers outputs
    by input (session 20: with one stream for all five trials it could have answered four from memory) finds no
    sequence it has seen, in another trial or in the untimed outputs check. One stream for every trial is caught."""
    from grader.context import Context
    from grader.exercises.ex04 import hidden

    ctx = Context.create(secret=20261126)
    streams = [hidden.hidden_stream(ctx)] + [hidden.hidden_stream(ctx, t) for t in range(hidden.STREAM_TRIALS)]
    assert all(len(s) == hidden.STREAM_BATCHES for s in streams)
    assert all(len(seqs) == hidden.STREAM_ROWS for s in streams for seqs in s.values())
    found = _repeated_sequence(streams)
    assert found is None, f"{found}: a remembered output would answer it"
    assert _repeated_sequence([hidden.hidden_stream(ctx)] * 2) == "trial 1, stream00"


def test_the_lessons_per_function_recompile_limit_cell_stops_at_the_third_shape(capsys) -> None:
    """The lesson's cell that sets the limit for one function, run on this torch: it branches on whether
    torch.compile takes ``recompile_limit=`` (2.14 and newer) and says which way it went, and either way two
    shapes run and the third raises. CI executes the notebook on torch 2.11 only; this runs the cell on both ends."""
    import inspect

    namespace = {"inspect": inspect, "torch": torch, "build": build, "pad_to_longest": pad_to_longest}
    namespace["sequences"] = sequences
    for source in lesson("dynamic_shapes").cells("lesson04-19"):
        exec(compile(source, "<lesson 4 cell>", "exec"), namespace)
    torch.compiler.reset()
    out = capsys.readouterr().out
    takes = "recompile_limit" in inspect.signature(torch.compile).parameters
    assert f"torch.compile accepts recompile_limit=: {takes}" in out
    assert "longest 5: ran" in out and "longest 6: ran" in out and "longest 7: ran" not in out, out
    assert "longest 7: " in out and "Recompile" in out.split("longest 7: ")[1], out


def test_packing_places_every_sequence_once_and_pads_least() -> None:
    from coursekit.lessons.dynamic_shapes.material import layout_costs, pack

    lengths = [5, 60, 33, 31, 2, 64, 17]
    rows = pack(lengths, 64)
    assert sorted(n for r in rows for n in r) == sorted(lengths) and all(sum(r) <= 64 for r in rows)
    with pytest.raises(ValueError, match="does not fit"):
        pack([65], 64)
    stream = length_stream(bench04.STEPS, bench04.BATCH, bench04.SEED)  # the stream the lesson's table counts
    costs = {r["layout"].split()[0]: r for r in layout_costs(stream, BUCKETS, MAX_LEN)}
    real = sum(map(sum, stream))
    assert costs["packed"]["shapes"] == 1 and costs["buckets"]["shapes"] <= len(BUCKETS)
    assert costs["pad"]["steps"] == costs["buckets"]["steps"] == bench04.STEPS >= costs["packed"]["steps"]
    # what the lesson's prose reads from the table: fewest positions packed, yet more scores than padding
    assert real <= costs["packed"]["tokens"] <= costs["pad"]["tokens"] <= costs["buckets"]["tokens"]
    assert costs["packed"]["scores"] > costs["pad"]["scores"]
    assert costs["pad"]["padding"] == pytest.approx(1 - real / costs["pad"]["tokens"])


def test_packed_rows_give_every_sequence_the_output_it_gets_alone() -> None:
    """One shape for every step, every sequence in exactly one slot, and its logits as if it ran alone: the mask
    keeps sequences that share a row apart, positions restart, and the mean pools each one on its own."""
    from coursekit.lessons.dynamic_shapes.material import PER_ROW, PackedClassifier, packed_batches

    stream = length_stream(5, 4, seed=3)
    model = build("plain", 0)
    packed_model = PackedClassifier().eval()
    packed_model.load_state_dict(model.state_dict())
    steps, where = packed_batches(stream, seed=3)
    assert {tuple(t.shape) for p in steps for t in p} == {(4, MAX_LEN)}
    assert sorted(v for held in where for v in held.values()) == [
        (b, j) for b, lengths in enumerate(stream) for j in range(len(lengths))
    ]
    assert any(len(held) > 4 for held in where), "no row holds two sequences: nothing was packed"
    with torch.no_grad():
        for p, held in zip(steps, where):
            out = packed_model(*p)
            assert out.shape == (4 * PER_ROW, model.head.out_features)
            for slot, (b, j) in held.items():
                seq = sequences(stream[b], 3 * 10_000 + b)[j]  # stream_batches' seeding, spelled out
                torch.testing.assert_close(out[slot], model(seq[None], torch.tensor([len(seq)]))[0])


def test_packing_is_timed_against_buckets_on_the_same_sequences(packing) -> None:
    """``measure_packing`` with the eager backend (Dynamo only): the same outputs both ways, a graph per bucket
    plus one packed graph, and both layouts timed."""
    result = packing
    assert result["max_abs_diff"] < 1e-5
    buckets, packed = result["layouts"]
    assert packed["shapes"] == 1 and result["graphs"] == buckets["shapes"] + 1
    assert all(r["tokens_per_s"] > 0 and r["pass_ms"]["median"] > 0 for r in result["layouts"])
    assert result["speedup"]["trials"] >= 1
    assert "packed vs buckets" in bench04.describe_packing(result)


@pytest.mark.slow
def test_the_stream_rehearsal_times_the_reference_against_the_graders_own_baseline(monkeypatch) -> None:
    """Two blind learners, session 36: the stream-time check could not be tried from the kit. ``rehearse_stream``
    runs the hidden check's baseline (``static_stream``, which the check itself calls) against the learner's
    compile over the same stream's sizes."""
    from coursekit.lessons import ROOT
    from coursekit.lessons.dynamic_shapes import rehearse
    from grader.exercises.ex04 import hidden
    from grader.loader import load_notebook

    assert hidden.static_stream is rehearse.static_stream, "the rehearsal's baseline is the check's own"
    mine = load_notebook(ROOT / "solutions" / lesson("dynamic_shapes").exercise).namespace
    sizes = []
    real = rehearse.your_stream
    monkeypatch.setattr(rehearse, "your_stream", lambda *a, **k: (sizes.append([len(s) for s in a[3]]), real(*a, **k)))
    report = rehearse.rehearse_stream(mine["compile_tagger"], mine["collate"], mine["MaskedTagger"], trials=1)
    assert len(report.ratios) == 1 and report.speedup > 0
    assert sizes[0] == [hidden.STREAM_ROWS] * hidden.STREAM_BATCHES
