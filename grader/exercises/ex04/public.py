"""Exercise 4, public checks (ship in the learner kit): the bucket and collate layout, and MaskedTagger's eager
outputs, compared with the given NaiveTagger run on each sequence unpadded. The hidden checks (a secret length
stream, compile counts, speed) live in ``hidden.py``."""

from __future__ import annotations

import torch
from torch import nn

from coursekit.lessons.dynamic_shapes.givens import MAX_BUCKETS, MAX_LEN, PAD, NaiveTagger, sequence
from grader.judging import assert_close
from grader.protocol import Answer
from grader.registry import check

MASK_HINT = (
    "Average over real positions only: with h [B, L, D] and mask [B, L], (h * mask[..., None]).sum(1) / "
    "mask.sum(1, keepdim=True); padding must not change any real row's result."
)


def naive(seed: int = 0) -> NaiveTagger:
    """The given model with seeded weights: its weights go to the learner's MaskedTagger."""
    torch.manual_seed(seed)
    return NaiveTagger()


def weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {f"w.{k}": v.detach().clone() for k, v in model.state_dict().items()}


@torch.no_grad()
def per_sequence(model: NaiveTagger, seqs: list[torch.Tensor]) -> torch.Tensor:
    """Logits for each sequence on its own, unpadded, in eager mode."""
    return torch.cat([model(s[None]) for s in seqs])


def batches_payload(batches: dict[str, list[torch.Tensor]]) -> tuple[dict, dict[str, torch.Tensor]]:
    """Arguments and tensors that send named batches of sequences to a probe."""
    tensors = {f"{name}.{i}": s for name, seqs in batches.items() for i, s in enumerate(seqs)}
    return {"rows": {name: len(seqs) for name, seqs in batches.items()}}, tensors


def ask_batches(
    learner, probe: str, batches: dict[str, list[torch.Tensor]], model: nn.Module | None = None, **args
) -> Answer:
    payload, tensors = batches_payload(batches)
    return learner.ask(probe, {**payload, **args}, {**tensors, **(weights(model) if model is not None else {})})


def expect_outputs(got: Answer, model: NaiveTagger, batches: dict[str, list[torch.Tensor]], what: str) -> None:
    for name, seqs in batches.items():
        assert_close(
            got.tensor(f"{name}.out"),
            per_sequence(model, seqs),
            torch.float32,
            f"{what} on {name} (lengths {[len(s) for s in seqs][:8]})",
            MASK_HINT,
        )


def buckets(learner) -> list[int]:
    """The learner's distinct bucket lengths over 1..MAX_LEN, checked."""
    values = learner.ask("ex04.buckets").ints("lengths")
    if len(values) != MAX_LEN:
        from grader.protocol import ProtocolError

        raise ProtocolError("probe ex04.buckets answered with the wrong number of lengths")
    for n, b in zip(range(1, MAX_LEN + 1), values):
        if b < n:
            raise AssertionError(f"bucket_length({n}) returned {b}: it must be an int of at least {n}")
        if b > 2 * MAX_LEN:  # the grader builds a batch of each bucket's length (red team, session 33: 3,000,000)
            raise AssertionError(
                f"bucket_length({n}) returned {b}: pad to at most 2 * MAX_LEN = {2 * MAX_LEN} tokens; padding "
                f"past the longest sequence ({MAX_LEN}) only costs time"
            )
    if any(b2 < b1 for b1, b2 in zip(values, values[1:])):
        raise AssertionError("bucket_length must never decrease as n grows")
    distinct = sorted(set(values))
    if len(distinct) > MAX_BUCKETS:
        raise AssertionError(
            f"bucket_length gives {len(distinct)} distinct lengths over 1..{MAX_LEN}; at most "
            f"{MAX_BUCKETS} keep compiles bounded (e.g. powers of two from 16 to {MAX_LEN})"
        )
    return values


@check("ex04.collate.layout", kind="correctness", points=1, needs=("bucket_length", "collate"), public=True)
def collate_layout(learner, ctx) -> None:
    """collate pads to bucket_length of the longest sequence, with PAD and a bool mask; buckets are few."""
    lengths_of = buckets(learner)
    batches = {
        f"b{k}": [sequence(n, 7 * n + i) for i, n in enumerate(lengths)]
        for k, lengths in enumerate(([3, 5, 5], [16], [17, 2, 9], [MAX_LEN, 1]))
    }
    got = ask_batches(learner, "ex04.collate", batches)
    for name, seqs in batches.items():
        lengths = [len(s) for s in seqs]
        tokens, mask = got.tensor(f"{name}.tokens"), got.tensor(f"{name}.mask")
        want = (len(seqs), lengths_of[max(lengths) - 1])
        if tuple(tokens.shape) != want or tuple(mask.shape) != want:
            raise AssertionError(
                f"for lengths {lengths}: tokens {tuple(tokens.shape)}, mask {tuple(mask.shape)}; expected both {want}"
            )
        if tokens.dtype != torch.long or mask.dtype != torch.bool:
            raise AssertionError(f"tokens must be int64 and mask bool; got {tokens.dtype} and {mask.dtype}")
        for row, seq in enumerate(seqs):
            n = len(seq)
            if not torch.equal(tokens[row, :n], seq) or not bool((tokens[row, n:] == PAD).all()):
                raise AssertionError(f"row {row} (length {n}): tokens must be the sequence, then PAD")
            if not bool(mask[row, :n].all()) or bool(mask[row, n:].any()):
                raise AssertionError(f"row {row} (length {n}): mask must be True on the {n} real tokens only")


@check(
    "ex04.tagger.outputs", kind="correctness", points=2, needs=("MaskedTagger", "collate", "bucket_length"), public=True
)
def tagger_outputs(learner, ctx) -> None:
    """MaskedTagger on padded batches equals NaiveTagger on each unpadded sequence (eager)."""
    model = naive()
    batches = {
        f"batch{k}": [sequence(n, 11 * n + i) for i, n in enumerate(lengths)]
        for k, lengths in enumerate(([5, 5, 5], [3, 17, 30, 2], [MAX_LEN - 1, 64], [1, 16]))
    }
    got = ask_batches(learner, "ex04.outputs", batches, model, compiled=False)
    expect_outputs(got, model, batches, "MaskedTagger")
