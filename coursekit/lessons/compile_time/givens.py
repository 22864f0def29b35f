"""Exercise 6's given code: a small ViT, a hybrid model with two kinds of repeated block, their data, and the
learning-rate schedule of the training loop.

The sizes are the same on every device: compile time depends on the graph (how many blocks, which
operators), not on how much data flows through it. ``DEPTH`` identical blocks make regional compilation
pay off; ``HybridNet`` spreads MLP-Mixer and ViT blocks over stages, with no ``blocks`` attribute. The
warm-up-then-cosine schedule changes the learning rate on every step, which is what makes a compiled optimizer
step recompile when the rate is a Python float.
"""

from __future__ import annotations

import math

import torch
from timm.layers import PatchEmbed
from timm.models.mlp_mixer import MixerBlock
from timm.models.vision_transformer import Block, VisionTransformer
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

DEPTH = 8  # identical transformer blocks
DIM = 32
HEADS = 2
IMAGE = 32
PATCH = 4
CLASSES = 10
BATCH = 16
LR = 1e-3
HEAD_LR_SCALE = 10.0  # the head (model.head) trains at this multiple of the body's learning rate
WEIGHT_DECAY = 0.05
WARMUP = 3  # steps of linear warm-up before the cosine decay
STEPS = 12  # steps of the schedule
STAGES = (("mixer", 3), ("attention", 3))  # HybridNet's stages: (kind of block, how many)

__all__ = [
    "BATCH",
    "CLASSES",
    "STAGES",
    "Block",
    "HybridNet",
    "MixerBlock",
    "DEPTH",
    "DIM",
    "HEAD_LR_SCALE",
    "HEADS",
    "IMAGE",
    "LR",
    "PATCH",
    "STEPS",
    "WARMUP",
    "WEIGHT_DECAY",
    "loss_fn",
    "make_batch",
    "make_hybrid",
    "make_model",
    "make_scheduler",
    "warmup_cosine",
]


def make_model(
    seed: int = 0, device: str = "cpu", depth: int = DEPTH, dim: int = DIM, heads: int = HEADS
) -> VisionTransformer:
    """A timm ViT of ``depth`` identical blocks (``model.blocks``) with seeded weights, on ``device``."""
    torch.manual_seed(seed)
    model = VisionTransformer(
        img_size=IMAGE, patch_size=PATCH, embed_dim=dim, depth=depth, num_heads=heads, num_classes=CLASSES
    )
    return model.to(device)


class HybridNet(nn.Module):
    """Patch embedding, then stages of repeated blocks (``self.stages[i]`` is an ``nn.Sequential`` of MLP-Mixer
    ``MixerBlock`` s or of ViT ``Block`` s), a LayerNorm, a mean over the tokens and a linear head."""

    KINDS = {"mixer": "MixerBlock: token mixing with MLPs", "attention": "Block: a ViT's self-attention block"}

    def __init__(self, stages=STAGES, dim: int = DIM, heads: int = HEADS) -> None:
        super().__init__()
        self.patch_embed = PatchEmbed(IMAGE, PATCH, 3, dim)
        tokens = self.patch_embed.num_patches
        make = {"mixer": lambda: MixerBlock(dim, tokens), "attention": lambda: Block(dim, heads)}
        self.stages = nn.ModuleList(nn.Sequential(*(make[kind]() for _ in range(n))) for kind, n in stages)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, CLASSES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(images)
        for stage in self.stages:
            x = stage(x)
        return self.head(self.norm(x).mean(1))


def make_hybrid(seed: int = 0, device: str = "cpu", stages=STAGES, dim: int = DIM, heads: int = HEADS) -> HybridNet:
    """A ``HybridNet`` with ``stages`` ((kind, count) pairs) and seeded weights, on ``device``."""
    torch.manual_seed(seed)
    return HybridNet(tuple(tuple(s) for s in stages), dim, heads).to(device)


def make_batch(seed: int, device: str = "cpu", batch: int = BATCH) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded images ``[batch, 3, IMAGE, IMAGE]`` and labels ``[batch]``, made on the CPU and moved to ``device``."""
    gen = torch.Generator().manual_seed(seed)
    images = torch.randn(batch, 3, IMAGE, IMAGE, generator=gen)
    labels = torch.randint(0, CLASSES, (batch,), generator=gen)
    return images.to(device), labels.to(device)


def warmup_cosine(warmup: int, steps: int):
    """The factor applied to the base learning rate at each step: linear warm-up, then cosine decay to 0."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, steps - warmup))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def make_scheduler(optimizer: torch.optim.Optimizer, steps: int = STEPS, warmup: int = WARMUP) -> LambdaLR:
    """The exercise's schedule: ``LambdaLR`` with linear warm-up over ``warmup`` steps, then cosine decay."""
    return LambdaLR(optimizer, warmup_cosine(warmup, steps))


def loss_fn() -> nn.Module:
    """The training loss: plain cross-entropy."""
    return nn.CrossEntropyLoss()
