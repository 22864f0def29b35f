"""Exercise 4, public checks: the ones a learner runs inside the exercise notebook.

This module ships in the learner kit (``make release``): the bucket and collate
layout check and the eager output check, with the helpers they need.  The hidden
checks (a secret length stream, compile counts, speed) live in
``grader.checks.ex04``, which imports from here and never ships.
"""

from __future__ import annotations

import torch

from coursekit.ex04 import MAX_BUCKETS, MAX_LEN, PAD, NaiveTagger, sequence
from grader.checks.common import assert_close, require_tensor
from grader.reference.ex04 import per_sequence, twin
from grader.registry import check

MASK_HINT = ("Average over real positions only: (h * mask).sum(1) / mask.sum(1); padding rows of the batch "
             "must not change any real row's result.")


def _buckets(sub) -> list[int]:
    bucket_length = sub.get("bucket_length")
    values = [bucket_length(n) for n in range(1, MAX_LEN + 1)]
    for n, b in zip(range(1, MAX_LEN + 1), values):
        if not isinstance(b, int) or b < n:
            raise AssertionError(f"bucket_length({n}) returned {b!r}: it must be an int of at least {n}")
    if any(b2 < b1 for b1, b2 in zip(values, values[1:])):
        raise AssertionError("bucket_length must never decrease as n grows")
    distinct = sorted(set(values))
    if len(distinct) > MAX_BUCKETS:
        raise AssertionError(f"bucket_length gives {len(distinct)} distinct lengths over 1..{MAX_LEN}; at most "
                             f"{MAX_BUCKETS} keep compiles bounded (e.g. powers of two from 16 to {MAX_LEN})")
    return distinct


def _models(sub, ctx):
    factory = sub.get("MaskedTagger")
    if not (isinstance(factory, type) and issubclass(factory, NaiveTagger)):
        raise AssertionError("MaskedTagger must subclass NaiveTagger (class MaskedTagger(NaiveTagger))")
    torch.manual_seed(0)
    model = factory().to(ctx.device)
    return model, twin(model)


def _run(fn, collate, batch, device):
    tokens, mask = collate(batch)
    require_tensor(tokens, "collate's tokens")
    return fn(tokens.to(device), mask.to(device))


@check("ex04.collate.layout", kind="correctness", points=1, needs=("bucket_length", "collate"), public=True)
def collate_layout(sub, ctx) -> None:
    """collate pads to bucket_length of the longest sequence, with PAD and a bool mask; buckets are few."""
    _buckets(sub)
    collate, bucket_length = sub.get("collate"), sub.get("bucket_length")
    for lengths in ([3, 5, 5], [16], [17, 2, 9], [MAX_LEN, 1]):
        seqs = [sequence(n, 7 * n + i) for i, n in enumerate(lengths)]
        out = collate(seqs)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise AssertionError("collate must return a tuple (tokens, mask)")
        tokens, mask = require_tensor(out[0], "tokens"), require_tensor(out[1], "mask")
        want = (len(seqs), bucket_length(max(lengths)))
        if tuple(tokens.shape) != want or tuple(mask.shape) != want:
            raise AssertionError(f"for lengths {lengths}: tokens {tuple(tokens.shape)}, mask {tuple(mask.shape)}; "
                                 f"expected both {want}")
        if tokens.dtype != torch.long or mask.dtype != torch.bool:
            raise AssertionError(f"tokens must be int64 and mask bool; got {tokens.dtype} and {mask.dtype}")
        for row, seq in enumerate(seqs):
            n = len(seq)
            if not torch.equal(tokens[row, :n], seq) or not bool((tokens[row, n:] == PAD).all()):
                raise AssertionError(f"row {row} (length {n}): tokens must be the sequence, then PAD")
            if not bool(mask[row, :n].all()) or bool(mask[row, n:].any()):
                raise AssertionError(f"row {row} (length {n}): mask must be True on the {n} real tokens only")


@check("ex04.tagger.outputs", kind="correctness", points=2, needs=("MaskedTagger", "collate", "bucket_length"),
       public=True)
def tagger_outputs(sub, ctx) -> None:
    """MaskedTagger on padded batches equals NaiveTagger on each unpadded sequence (eager)."""
    model, naive = _models(sub, ctx)
    collate = sub.get("collate")
    for lengths in ([5, 5, 5], [3, 17, 30, 2], [MAX_LEN - 1, 64], [1, 16]):
        seqs = [sequence(n, 11 * n + i) for i, n in enumerate(lengths)]
        with torch.no_grad():
            got = _run(model, collate, seqs, ctx.device)
        assert_close(got, per_sequence(naive, [s.to(ctx.device) for s in seqs]), torch.float32,
                     f"MaskedTagger on a batch of lengths {lengths}", MASK_HINT)
