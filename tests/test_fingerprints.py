"""Every timed call leaves a fingerprint, and the judge's spot checks catch a sample whose calls were skipped."""

from __future__ import annotations

import os
import random
import time

import pytest
import torch

from coursekit.profile import get_profile
from grader import speed
from grader.local_learner import LocalLearner
from grader.probing import (
    REACH,
    SCALE,
    Call,
    Reply,
    chained,
    multipliers,
    probe,
    run_schedule,
    seeded,
    stage_timed,
    transform,
)
from grader.speed import FINGERPRINT_RTOL, check_fingerprints, check_lockstep, linked

STAGED = [(torch.randn(4, 3, generator=torch.Generator().manual_seed(i)),) for i in range(3)]
SCHEDULE = [(0, 0.8), (2, 1.1), (1, 1.25), (0, 1.0)]


def loss(x: torch.Tensor) -> torch.Tensor:
    out = (x.sin() * 3).sum()
    out.backward()
    return out


def want(entry: tuple[int, float]) -> torch.Tensor:
    return run_schedule(loss, STAGED, [entry], (True,))[1][0]


def test_each_call_leaves_the_fingerprint_of_its_own_output_and_input_gradients() -> None:
    out, prints = run_schedule(loss, STAGED, SCHEDULE, (True,))
    assert prints.shape == (len(SCHEDULE), 2)
    for row, (index, scale) in zip(prints, SCHEDULE):
        x = (STAGED[index][0] * scale).requires_grad_()
        made = loss(x)
        assert torch.allclose(row, torch.stack([made.detach().abs(), x.grad.abs().sum()]))
    assert torch.allclose(out, (STAGED[0][0].sin() * 3).sum())  # the last output, as before
    assert (prints[:, 1] > 0).all()


def test_honest_fingerprints_pass_every_spot_check() -> None:
    _, prints = run_schedule(loss, STAGED, SCHEDULE, (True,))
    check_fingerprints(prints, SCHEDULE, want, picks=list(range(len(SCHEDULE))))


def test_a_skipped_call_is_caught_where_the_judge_looks() -> None:
    _, last = run_schedule(loss, STAGED, SCHEDULE[-1:], (True,))
    copied = last.expand(len(SCHEDULE), 2).clone()  # the last call run, its fingerprint copied for the others
    check_fingerprints(copied, SCHEDULE, want, picks=[3])  # the one call that did run passes
    with pytest.raises(AssertionError, match="call 2 of 4 .* did not compute what it should during timing"):
        check_fingerprints(copied, SCHEDULE, want, picks=[3, 1])
    with pytest.raises(AssertionError, match=r"record has shape \(1, 2\), not \(4, 2\)"):
        check_fingerprints(last, SCHEDULE, want, picks=[])


def test_a_skipped_backward_shows_in_the_parameters_gradients() -> None:
    """A timed forward and backward whose gradients land in a model's parameters, not in its input (exercise 2):
    with the parameters staged, a call that returns the right output but skips the backward is caught."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    params = tuple(model.parameters())

    def fwd_bwd(x: torch.Tensor) -> torch.Tensor:
        out = model(x)
        out.square().sum().backward()
        return out

    def forward_only(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return model(x)

    def want_model(entry: tuple[int, float]) -> torch.Tensor:
        return run_schedule(fwd_bwd, STAGED, [entry], (False,), params)[1][0]

    _, honest = run_schedule(fwd_bwd, STAGED, SCHEDULE, (False,), params)
    assert (honest[:, 1] > 0).all()  # every call's own gradients, cleared before the next call
    check_fingerprints(honest, SCHEDULE, want_model, picks=list(range(len(SCHEDULE))))
    _, skipped = run_schedule(forward_only, STAGED, SCHEDULE, (False,), params)
    assert torch.equal(skipped[:, 0], honest[:, 0])  # the outputs alone cannot tell
    with pytest.raises(AssertionError, match="call 1 of 4 .* did not compute what it should"):
        check_fingerprints(skipped, SCHEDULE, want_model, picks=[0])


def _trainer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    return model, torch.optim.AdamW(model.parameters(), lr=0.05)


def _stepper(model: torch.nn.Module, optimizer: torch.optim.Optimizer, skip: set[int] = frozenset()):
    """A training step (exercise 3's kind of timed call): its loss depends on every step before it. Calls whose
    number is in ``skip`` return the last loss again instead of training."""
    calls, last = [0], [None]

    def step(x: torch.Tensor) -> torch.Tensor:
        calls[0] += 1
        if last[0] is not None and calls[0] in skip:
            return last[0]
        optimizer.zero_grad()
        loss = (model(x) - 1).square().mean()
        loss.backward()
        optimizer.step()
        last[0] = loss.detach()
        return last[0]

    return step


def test_a_training_step_in_lockstep_passes_and_a_skipped_step_shows_on_the_next_call() -> None:
    baseline = _stepper(*_trainer())
    _, expected = run_schedule(baseline, STAGED, SCHEDULE * 2, (False,))
    _, honest = run_schedule(_stepper(*_trainer()), STAGED, SCHEDULE * 2, (False,))
    check_lockstep(honest, expected)
    _, skipping = run_schedule(_stepper(*_trainer(), skip={4}), STAGED, SCHEDULE * 2, (False,))
    assert torch.equal(skipping[:3], expected[:3])  # the same until the skipped call
    with pytest.raises(AssertionError, match="call 4 of 8 .* did not compute what it should .* same order"):
        check_lockstep(skipping, expected)
    with pytest.raises(AssertionError, match=r"record has shape \(1, 2\), not \(8, 2\)"):
        check_lockstep(expected[-1:], expected)


def test_with_a_seed_every_column_has_a_factor_of_its_own_which_the_judge_spells_out_to_recompute_a_call() -> None:
    seed = 1234
    out, prints = run_schedule(loss, STAGED, SCHEDULE, (True,), seed=seed)
    calls = seeded(SCHEDULE, seed, STAGED)
    factors = multipliers(seed, len(SCHEDULE), STAGED)[3]
    assert factors.shape == (len(SCHEDULE), 3) and SCALE[0] <= factors.min() and factors.max() <= SCALE[1]
    assert len(set(factors[0].tolist())) == 3, "each column its own factor"
    for c, (_, scale) in enumerate(calls):
        assert torch.equal(scale[3], factors[c])
    assert torch.allclose(out, loss((STAGED[0][0] * factors[3]).requires_grad_()))
    check_fingerprints(prints, calls, want, picks=list(range(len(SCHEDULE))))
    _, again = run_schedule(loss, STAGED, SCHEDULE, (True,), seed=seed + 1)
    assert not torch.allclose(again, prints), "another seed, other inputs"


def test_a_table_over_one_factor_no_longer_predicts_a_timed_call() -> None:
    """Red team, session 33: with one factor a call, learner code tabulated every set's fingerprints over the factor's
    range in the untimed first call and answered most timed calls by interpolation (ex02's naive scorer: 1.93x
    against the 1.25x asked). The same table, read at any factor, misses a call whose columns have factors of
    their own by far more than the judge's tolerance."""
    grid = torch.linspace(*SCALE, 200).tolist()
    table = run_schedule(loss, STAGED, [(0, s) for s in grid], (True,))[1]
    inside = run_schedule(loss, STAGED, [(0, 1.0123)], (True,))[1][0]
    k = next(i for i, s in enumerate(grid) if s > 1.0123)
    t = (1.0123 - grid[k - 1]) / (grid[k] - grid[k - 1])
    guessed = table[k - 1] + t * (table[k] - table[k - 1])
    assert torch.allclose(guessed, inside, rtol=FINGERPRINT_RTOL), "one factor: the table predicts the call"
    _, timed = run_schedule(loss, STAGED, [(0, 1.0)] * 50, (True,), seed=99)
    best = (table[:, None, :] - timed[None, :, :]).abs().div(timed.abs()).amax(dim=2).amin(dim=0)
    assert (best > FINGERPRINT_RTOL).float().mean() > 0.9, "a row of the table matches a seeded call by chance"


CHAINED = [(i % 3, 1.0) for i in range(40)]


def _misses(prints: torch.Tensor, calls: list, fn=loss) -> float:
    """The share of calls after the first that the judge's spot check, recomputing each alone, rejects."""

    def want_fn(entry: tuple) -> torch.Tensor:
        return run_schedule(fn, STAGED, [entry], (True,))[1][0]

    missed = 0
    for j in range(1, len(calls)):
        try:
            check_fingerprints(prints, calls, want_fn, picks=[j])
        except AssertionError:
            missed += 1
    return missed / (len(calls) - 1)


def test_chained_calls_pass_every_spot_check_recomputed_from_the_fingerprints_reported() -> None:
    out, prints = run_schedule(loss, STAGED, CHAINED, (True,), seed=7, chain=True)
    calls = linked(seeded(CHAINED, 7, STAGED), prints)
    check_fingerprints(prints, calls, want, picks=list(range(len(CHAINED))))
    index, scale = calls[-1]
    assert torch.allclose(out, loss((STAGED[index][0] * scale[3]).requires_grad_()))
    _, unchained = run_schedule(loss, STAGED, CHAINED, (True,), seed=7)
    assert torch.equal(unchained[0], prints[0]), "the first call has no call before it"
    with pytest.raises(AssertionError, match=r"record has shape \(39, 2\), not \(40, 2\)"):
        linked(seeded(CHAINED, 7, STAGED), prints[1:])


def test_calls_computed_from_the_seed_alone_as_a_batch_would_need_them_fail_the_spot_checks() -> None:
    """Red team 2, session 33: once a sample's seed arrived, every call's factors were known, and learner code
    computed the calls together, batched (exercise 2's slow scorer: 1.37x to 1.86x against 1.25x). Chained,
    a call's factors need the fingerprint of the call before it: the same calls computed without it are caught."""
    _, batched = run_schedule(loss, STAGED, CHAINED, (True,), seed=7)  # each call's factors from the seed alone
    assert _misses(batched, linked(seeded(CHAINED, 7, STAGED), batched)) > 0.9


def test_a_fingerprint_guessed_to_one_percent_gives_the_next_call_away() -> None:
    """A cheap model that guessed each call's fingerprint to 1% instead of running it would still compute the next
    call on the wrong factors."""
    calls = seeded(CHAINED, 7, STAGED)
    prints, previous = [], None
    for index, scale in calls:
        guess = None if previous is None else [t * 1.01 for t in previous]
        row = run_schedule(loss, STAGED, [(index, chained(scale, guess))], (True,))[1][0]
        prints.append(row)
        previous = list(row.unbind())
    prints = torch.stack(prints)
    assert _misses(prints, linked(calls, prints)) > 0.9


def test_the_chain_reaches_a_function_blind_to_a_uniform_scale_of_its_input() -> None:
    """A normalisation cancels one factor for all columns; the chain's factors differ column by column."""

    def normalised(x: torch.Tensor) -> torch.Tensor:
        out = (x / x.norm()).sin().sum()
        out.backward()
        return out

    x = STAGED[0][0]
    factors = chained({3: torch.ones(3)}, [torch.tensor(2.5), torch.tensor(0.7)])[3]
    assert len(set(factors.tolist())) == 3, "a factor a column"
    blind = [run_schedule(normalised, [(x * f,)], [(0, 1.0)], (True,))[1][0, 0] for f in (1.0, factors.mean())]
    assert torch.allclose(*blind, rtol=1e-6), "its output cannot see one factor for every column"
    _, unchained = run_schedule(normalised, STAGED, CHAINED, (True,), seed=7)
    assert _misses(unchained, linked(seeded(CHAINED, 7, STAGED), unchained), normalised) > 0.9


@pytest.mark.parametrize("forged", [float("nan"), float("inf"), -1.0])
@pytest.mark.parametrize("row", [0, -2])
def test_a_fingerprint_no_l1_norm_can_have_fails_before_the_judge_chains_from_it(forged: float, row: int) -> None:
    """The judge computes each call's chain from fingerprints the worker reports: nan there made the judge's own
    reference for the next call nan, which the last-output check passes (nan equals nan), so a nan in the row before
    the last let the last call go unrun (a review, session 35). L1 norms are finite and never negative: any other
    row fails the sample before anything is chained from it, and so does a record of another dtype."""
    _, honest = run_schedule(loss, STAGED, CHAINED, (True,), seed=7, chain=True)
    fake = honest.clone()
    fake[row] = forged
    with pytest.raises(AssertionError, match="holds nan, inf or a negative norm"):
        linked(seeded(CHAINED, 7, STAGED), fake)
    with pytest.raises(AssertionError, match="holds nan, inf or a negative norm"):
        check_fingerprints(fake, seeded(CHAINED, 7, STAGED), want, picks=[0])
    for dtype in (torch.int64, torch.bool, torch.float64):
        with pytest.raises(AssertionError, match="not float32"):
            linked(seeded(CHAINED, 7, STAGED), honest.to(dtype))


def _split_chain(k: int) -> torch.Tensor:
    """A sample's record with row ``k`` made up (its true fingerprint times 1.5) and calls ``k + 1``... chained from
    the made-up row, as code would compute them side by side with calls 0..k-1: two chains, one forged row."""
    calls = seeded(CHAINED, 7, STAGED)
    _, honest = run_schedule(loss, STAGED, CHAINED, (True,), seed=7, chain=True)
    prints, previous = [], None
    for c, (index, scale) in enumerate(calls):
        row = run_schedule(loss, STAGED, [(index, chained(scale, previous))], (True,))[1][0]
        if c == k:
            row = honest[k] * 1.5
        prints.append(row)
        previous = list(row.unbind())
    return torch.stack(prints)


def test_one_forged_fingerprint_splits_a_chain_which_only_a_whole_sample_recomputed_catches() -> None:
    """A review, session 35: the judge chains each call from the row reported before it, so one made-up row lets
    the calls after it start at once, beside the calls before it. A spot check sees it only where it picks that
    row; recomputing every call of a sample always does."""
    forged = _split_chain(k=20)
    calls = linked(seeded(CHAINED, 7, STAGED), forged)
    assert _misses(forged, calls) < 0.05, "spot checks: only the forged row itself is caught"
    with pytest.raises(AssertionError, match="call 21 of 40 .* did not compute what it should"):
        check_fingerprints(forged, calls, want, picks=list(range(len(CHAINED))))


class _TimedLearner(LocalLearner):
    """In-process probes that report this process's CPU time, so the comparison bounds it (``check_cores``)."""

    def cpu_ns(self) -> int | None:
        return time.process_time_ns()


def test_a_comparison_recomputes_every_call_of_some_samples_picked_in_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """A review, session 35: ``WHOLE_SAMPLES`` of the timed samples have every call recomputed, the rest two; the
    call that sizes the learner's samples is checked too; the untimed first sample runs every set at both ends of
    every factor a chained call can reach (``REACH``); and the CPU-time bound counts the cores the learner is
    pinned to, not the threads asked for."""
    seen: list[list] = []  # each checked sample's schedule and how many of its calls were recomputed
    real = speed.check_fingerprints

    def recording(prints, schedule, want_fn, picks):
        seen.append([schedule, len(list(picks))])
        return real(prints, schedule, want_fn, picks)

    bounds: list[int] = []
    real_cores = speed.check_cores
    monkeypatch.setattr(speed, "check_fingerprints", recording)
    monkeypatch.setattr(
        speed, "check_cores", lambda used, seconds, cores: (bounds.append(cores), real_cores(used, seconds, 99))
    )
    monkeypatch.setattr(speed, "timing_cores", lambda threads: set(sorted(os.sched_getaffinity(0))[:1]))
    learner = _TimedLearner({}, "ex01", get_profile("smoke"))
    learner.ask("test.stage_sine", {"handle": "h"})
    trials, warmup = 6, 1
    speed.compare(
        learner,
        "h",
        lambda x: x.sin(),
        lambda i: (torch.linspace(-1, 1, 16) * (i + 1),),
        grads=(False,),
        device="cpu",
        trials=trials,
        warmup=warmup,
        min_sample_s=0.002,
        threads=2,
        rng=random.Random(3),
        sets=2,
    )
    assert len(seen) == 1 + warmup + 1 + trials, "the first sample, the warm-up, the sizing call, every trial"
    assert {scale for _, scale in seen[0][0]} == set(REACH)
    timed = [(len(schedule), picked) for schedule, picked in seen[-trials:]]
    assert all(n > speed.SPOT_CHECKS for n, _ in timed), "samples long enough that a spot check is not every call"
    whole = [n for n, picked in timed if picked == n]
    assert len(whole) == speed.WHOLE_SAMPLES, timed
    assert all(picked == speed.SPOT_CHECKS for n, picked in timed if picked != n)
    assert bounds == [1] * trials, "pinned to one core: one core's worth, whatever the threads"


def test_the_factors_are_float32_whatever_the_default_dtype_and_an_input_keeps_its_own() -> None:
    """A review, session 35: under ``torch.set_default_dtype(torch.float64)`` (a notebook's, in the worker) the
    worker drew a float64 table and the judge a float32 one, and every speed check failed as cheating; and a bf16
    input became float32 in timed calls only."""
    judge = multipliers(5, 3, STAGED)[3]
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        worker = multipliers(5, 3, STAGED)[3]
    finally:
        torch.set_default_dtype(before)
    assert worker.dtype == torch.float32 and torch.equal(worker, judge)
    half = (STAGED[0][0].bfloat16(),)
    assert transform(half, {3: judge[0]}, (False,))[0].dtype == torch.bfloat16


@probe("test.stage_sine")
def _stage_sine(call: Call) -> Reply:
    return stage_timed(call, call.arg("handle"), lambda x: x.sin())
