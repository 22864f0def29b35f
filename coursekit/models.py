"""Models used by the lessons and the grader."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from coursekit.profile import Profile

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class ViTShape:
    """The size of one timm ``VisionTransformer``: blocks, embedding width, attention heads. Each lesson keeps
    its own per profile in its manifest (``[sizes.<profile>]``)."""

    depth: int
    dim: int
    heads: int


class ToyConvNet(nn.Module):
    """The source article's small classifier: eight 3x3 convs with ReLU and 2x2 max-pool.

    The article feeds 256x256 images, which eight poolings reduce to 1x1; smaller
    images (the smoke profile) pool only until they reach 1x1.
    """

    widths = (3, 8, 12, 16, 20, 24, 28, 32)

    def __init__(self, image_size: int = 256, num_classes: int = 10) -> None:
        super().__init__()
        chans = [*self.widths, num_classes]
        self.convs = nn.ModuleList(nn.Conv2d(a, b, 3, padding=1) for a, b in zip(chans, chans[1:]))
        self.num_pools = min(len(self.convs), int(math.log2(image_size)))
        self.pool = nn.MaxPool2d(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, conv in enumerate(self.convs):
            x = F.relu(conv(x))
            if i < self.num_pools:
                x = self.pool(x)
        return torch.flatten(x.amax(dim=(2, 3), keepdim=True), 1)


def make_vit(profile: Profile, shape: ViTShape, seed: int = 0) -> VisionTransformer:
    """A timm ``VisionTransformer`` of ``shape`` for the profile's images, on its device."""
    torch.manual_seed(seed)
    model = VisionTransformer(
        img_size=profile.vit_image,
        patch_size=profile.vit_patch,
        num_classes=profile.vit_classes,
        embed_dim=shape.dim,
        depth=shape.depth,
        num_heads=shape.heads,
    )
    return model.to(profile.device)


def image_batch(profile: Profile, seed: int) -> Batch:
    """Random images and labels (the article's fake dataset), made on the CPU for repeatability."""
    gen = torch.Generator().manual_seed(seed)
    images = torch.randn(profile.vit_batch, 3, profile.vit_image, profile.vit_image, generator=gen)
    labels = torch.randint(0, profile.vit_classes, (profile.vit_batch,), generator=gen)
    return images.to(profile.device), labels.to(profile.device)
