"""Lesson 4's model and data: a small transformer encoder over variable-length token sequences.

* ``SeqClassifier``: token + learned position embeddings, one pre-norm attention
  block (``F.scaled_dot_product_attention`` with a key-padding mask), a
  feed-forward block, a masked mean pool and a linear classifier.
  ``forward(tokens [B, L], lengths [B])`` builds its mask from ``lengths``, so a
  padded batch gives each sequence the same output as that sequence alone.
* ``length_stream``: seeded, length-grouped batches (the longest sequence of each
  batch varies from step to step, as with a sampler that groups by length).
* ``pad_to_longest`` (the usual collate: a new shape almost every step) and
  ``pad_to_bucket`` (pad up to one of a few fixed lengths: a few static shapes).
* ``pack``/``packed_batches`` and ``PackedClassifier``: the other way to fixed shapes, several sequences per
  row of ``MAX_LEN`` (a block-diagonal mask, restarting positions, a mean per sequence), the same outputs.
* ``CountingClassifier`` keeps a Python ``int`` step counter that ``forward``
  reads (a warm-up ramp), ``FloatRampClassifier`` a Python ``float`` the training
  loop sets, and ``BufferClassifier`` the fix: the counter as a tensor buffer.

All classes share one ``state_dict`` layout (the counters are non-persistent).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 256
PAD = 0
MAX_LEN = 64  # longest sequence in any stream (the position table's size)
MIN_LEN = 2
BUCKETS = (16, 32, 64)  # pad_to_bucket's lengths
RAMP_STEPS = 100  # the scalar-guard variants' warm-up ramp

Batch = tuple[torch.Tensor, torch.Tensor]  # tokens [B, L] (PAD beyond each length), lengths [B] int64
Collate = Callable[[Sequence[torch.Tensor]], Batch]


class SeqClassifier(nn.Module):
    """Embed, one attention block, feed-forward, masked mean pool, classify."""

    def __init__(
        self, vocab: int = VOCAB, dim: int = 32, heads: int = 4, classes: int = 4, max_len: int = MAX_LEN
    ) -> None:
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, dim, padding_idx=PAD)
        self.pos = nn.Parameter(0.02 * torch.randn(max_len, dim))
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.head = nn.Linear(dim, classes)

    def ramp(self) -> float | torch.Tensor:
        """How much of the position embedding to add (1 here; the scalar-guard variants ramp it up)."""
        return 1.0

    def attention(self, h: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """Multi-head self-attention; ``keep [B, L]`` is False at padded positions (never attended to)."""
        return self.attend(h, keep[:, None, None, :])

    def attend(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Multi-head self-attention where ``mask`` (broadcast to ``[B, heads, L, L]``) is True."""
        b, n, d = h.shape
        q, k, v = self.qkv(h).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        keep = torch.arange(n, device=tokens.device) < lengths[:, None]  # [B, L]
        h = self.embed(tokens) + self.ramp() * self.pos[:n]
        h = h + self.attention(self.norm1(h), keep)
        h = h + self.ff(self.norm2(h))
        w = keep.unsqueeze(-1).to(h.dtype)
        pooled = (h * w).sum(1) / w.sum(1)  # masked mean: padded positions do not count
        return self.head(pooled)


class CountingClassifier(SeqClassifier):
    """Counts its calls in a Python ``int`` and ramps the position embedding in over ``RAMP_STEPS`` calls.

    Dynamo specialises ``int`` attributes of modules: every call sees a new
    constant, fails a guard and recompiles, until the recompile limit.
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.step = 0

    def ramp(self) -> float:
        self.step += 1
        return min(1.0, self.step / RAMP_STEPS)


class FloatRampClassifier(SeqClassifier):
    """The ramp as a Python ``float`` attribute that the training loop sets before each call."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.alpha = 0.0

    def ramp(self) -> float:
        return self.alpha


class BufferClassifier(SeqClassifier):
    """The fix: the counter is a tensor buffer, updated in place inside the graph (no guard on its value)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.register_buffer("step", torch.zeros((), dtype=torch.long), persistent=False)

    def ramp(self) -> torch.Tensor:
        with torch.no_grad():
            self.step.add_(1)
        return (self.step / RAMP_STEPS).clamp(max=1.0)


VARIANTS: dict[str, type[SeqClassifier]] = {
    "plain": SeqClassifier,
    "int counter": CountingClassifier,
    "float attribute": FloatRampClassifier,
    "tensor buffer": BufferClassifier,
}


def build(name: str = "plain", seed: int = 0, device: str = "cpu") -> SeqClassifier:
    """A variant of ``VARIANTS`` with seeded weights (the same for every variant), in eval mode."""
    torch.manual_seed(seed)
    return VARIANTS[name]().to(device).eval()


def length_stream(
    steps: int, batch: int, seed: int, *, low: int = MIN_LEN, high: int = MAX_LEN, spread: float = 0.5
) -> list[list[int]]:
    """Sequence lengths per step: each batch's longest is random in ``[low, high]``, the rest at least
    ``1 - spread`` times it (batches of similar lengths, as a sampler that groups by length delivers them)."""
    rng = random.Random(seed)
    steps_out = []
    for _ in range(steps):
        longest = rng.randint(low, high)
        shortest = max(low, int(longest * (1 - spread)))
        steps_out.append([longest] + [rng.randint(shortest, longest) for _ in range(batch - 1)])
    return steps_out


def sequences(lengths: Sequence[int], seed: int) -> list[torch.Tensor]:
    """Random token sequences (no ``PAD``) of the given lengths."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(1, VOCAB, (n,), generator=gen) for n in lengths]


def pad_to(seqs: Sequence[torch.Tensor], length: int) -> Batch:
    """Right-pad ``seqs`` with ``PAD`` to ``length``; also their true lengths."""
    tokens = torch.full((len(seqs), length), PAD, dtype=torch.long)
    for row, s in zip(tokens, seqs):
        row[: len(s)] = s
    return tokens, torch.tensor([len(s) for s in seqs])


def pad_to_longest(seqs: Sequence[torch.Tensor]) -> Batch:
    """The usual collate: pad to the batch's longest sequence (a new shape whenever that changes)."""
    return pad_to(seqs, max(len(s) for s in seqs))


def bucket_for(length: int, buckets: Sequence[int] = BUCKETS) -> int:
    """The smallest bucket that holds ``length``."""
    for b in sorted(buckets):
        if length <= b:
            return b
    raise ValueError(f"length {length} exceeds the largest bucket {max(buckets)}")


def pad_to_bucket(seqs: Sequence[torch.Tensor], buckets: Sequence[int] = BUCKETS) -> Batch:
    """Pad to the smallest bucket that holds the longest sequence: only ``len(buckets)`` lengths ever (and shapes,
    with a fixed batch size)."""
    return pad_to(seqs, bucket_for(max(len(s) for s in seqs), buckets))


def stream_batches(
    stream: Sequence[Sequence[int]], seed: int, collate: Collate = pad_to_longest, device: str = "cpu"
) -> list[Batch]:
    """One collated batch per step of ``stream`` (the same tokens for every collate), on ``device``."""
    out = []
    for seqs in stream_sequences(stream, seed):
        tokens, lens = collate(seqs)
        out.append((tokens.to(device), lens.to(device)))
    return out


def stream_sequences(stream: Sequence[Sequence[int]], seed: int) -> list[list[torch.Tensor]]:
    """The token sequences of each step of ``stream``, seeded per step: what every layout of it holds."""
    return [sequences(lengths, seed * 10_000 + i) for i, lengths in enumerate(stream)]


def pack(lengths: Sequence[int], row_len: int = MAX_LEN) -> list[list[int]]:
    """Packing, the fixed-shape alternative to padding: place sequences of these lengths into rows of ``row_len``
    tokens, longest first, each into the first row with room (first fit decreasing). Returns each row's lengths."""
    return [[lengths[i] for i in row] for row in pack_indices(lengths, row_len)]


def pack_indices(lengths: Sequence[int], row_len: int = MAX_LEN) -> list[list[int]]:
    """``pack``, as the indices (into ``lengths``) of the sequences each row holds."""
    rows: list[list[int]] = []
    used: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        n = lengths[i]
        if n > row_len:
            raise ValueError(f"a sequence of {n} tokens does not fit a row of {row_len}")
        r = next((r for r, u in enumerate(used) if u + n <= row_len), None)
        if r is None:
            rows.append([])
            used.append(0)
            r = len(rows) - 1
        rows[r].append(i)
        used[r] += n
    return rows


def layout_costs(
    stream: Sequence[Sequence[int]], buckets: Sequence[int] = BUCKETS, row_len: int = MAX_LEN
) -> list[dict]:
    """What each way of laying a stream of batches out in tensors computes, counted rather than timed.

    ``tokens`` counts the positions the model computes (padding included) and ``scores`` the attention scores
    (rows times length squared); ``shapes`` counts the distinct tensor shapes (static compiles). Packing refills
    steps of as many rows as the stream's batches, so a step holds sequences from several of them."""
    rows = len(stream[0])
    longest = [(len(b), max(b)) for b in stream]
    bucketed = [(len(b), bucket_for(max(b), buckets)) for b in stream]
    packed = pack([n for b in stream for n in b], row_len)
    steps = -(-len(packed) // rows)

    def row(layout: str, shapes: list[tuple[int, int]]) -> dict:
        return {
            "layout": layout,
            "steps": len(shapes),
            "tokens": sum(r * n for r, n in shapes),
            "scores": sum(r * n * n for r, n in shapes),
            "shapes": len(set(shapes)),
        }

    real = sum(sum(b) for b in stream)
    out = [
        row("pad to the longest", longest),
        row(f"buckets {tuple(buckets)}", bucketed),
        row(f"packed into rows of {row_len}", [(rows, row_len)] * steps),
    ]
    for r in out:
        r["padding"] = 1 - real / r["tokens"]
    return out


PER_ROW = MAX_LEN // MIN_LEN  # the most sequences a row of MAX_LEN can hold: each row's output slots


class PackedBatch(NamedTuple):
    """One step of packed rows, every tensor ``[R, MAX_LEN]``: tokens (``PAD`` where a row is empty), each
    position's sequence within its row (1, 2, ...; 0 where empty), its position within that sequence, and its
    output slot (``row * PER_ROW + sequence - 1``; ``R * PER_ROW`` where empty, a slot that is thrown away)."""

    tokens: torch.Tensor
    segments: torch.Tensor
    positions: torch.Tensor
    slots: torch.Tensor


def packed_batches(
    stream: Sequence[Sequence[int]], seed: int, row_len: int = MAX_LEN, device: str = "cpu"
) -> tuple[list[PackedBatch], list[dict[int, tuple[int, int]]]]:
    """The sequences of ``stream_batches(stream, seed, ...)`` (the same tokens) packed with ``pack_indices`` into
    steps of as many rows as the stream's batches, the last step filled up with empty rows: one shape for every
    step. Also, per step, which ``(batch, index in batch)`` each output slot that holds a sequence holds."""
    rows = len(stream[0])
    seqs = [(b, j, s) for b, step in enumerate(stream_sequences(stream, seed)) for j, s in enumerate(step)]
    packed = pack_indices([len(s) for _, _, s in seqs], row_len)
    steps, where = [], []
    for first in range(0, len(packed), rows):
        tokens, segments, positions = (torch.zeros(rows, row_len, dtype=torch.long) for _ in range(3))
        tokens.fill_(PAD)
        slots = torch.full((rows, row_len), rows * PER_ROW, dtype=torch.long)
        held = {}
        for r, row in enumerate(packed[first : first + rows]):
            at = 0
            for k, i in enumerate(row):
                b, j, s = seqs[i]
                n = len(s)
                tokens[r, at : at + n] = s
                segments[r, at : at + n] = k + 1
                positions[r, at : at + n] = torch.arange(n)
                slots[r, at : at + n] = r * PER_ROW + k
                held[r * PER_ROW + k] = (b, j)
                at += n
        steps.append(PackedBatch(*(t.to(device) for t in (tokens, segments, positions, slots))))
        where.append(held)
    return steps, where


class PackedClassifier(SeqClassifier):
    """``SeqClassifier`` over packed rows: the same weights, and each sequence's output the same as alone."""

    def forward(
        self, tokens: torch.Tensor, segments: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor
    ) -> torch.Tensor:
        """Logits for every output slot, ``[R * PER_ROW, classes]`` (slots no sequence holds give the head's
        bias). A position attends only to its own sequence (a block-diagonal mask; an empty position to itself),
        position embeddings restart with each sequence, and the mean pools each sequence on its own."""
        same = (segments[:, :, None] == segments[:, None, :]) & (segments[:, None, :] > 0)
        mask = same | torch.eye(tokens.shape[1], dtype=torch.bool, device=tokens.device)
        h = self.embed(tokens) + self.ramp() * self.pos[positions]
        h = h + self.attend(self.norm1(h), mask[:, None])
        h = h + self.ff(self.norm2(h))
        n_slots = tokens.shape[0] * PER_ROW
        flat, index = h.reshape(-1, h.shape[-1]), slots.reshape(-1)
        sums = flat.new_zeros(n_slots + 1, flat.shape[1]).index_add_(0, index, flat)
        counts = flat.new_zeros(n_slots + 1).index_add_(0, index, torch.ones_like(index, dtype=flat.dtype))
        pooled = sums[:n_slots] / counts[:n_slots].clamp_min(1)[:, None]  # the last slot, the empty one, dropped
        return self.head(pooled)
