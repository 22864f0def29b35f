"""Fake CIFAR-like data, drawn on the CPU (a seeded generator, the same on every device) and copied to the device.

The article decodes random uint8 images with PIL and resizes them to 256x256
in a DataLoader; here the same kind of batch is made directly as tensors so
the data pipeline never dominates what the lessons measure.
"""

from __future__ import annotations

import torch

from coursekit.profile import Profile


def fake_cifar_batch(profile: Profile, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch of normalised images in [-1, 1] and int64 labels, reproducible by ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    size = (profile.batch_size, 3, profile.image_size, profile.image_size)
    images = torch.randint(0, 256, size, generator=gen, dtype=torch.uint8)
    labels = torch.randint(0, profile.num_classes, (profile.batch_size,), generator=gen)
    images = images.to(profile.device, non_blocking=True)
    images = (images.to(torch.float32) / 255.0 - 0.5) / 0.5
    return images, labels.to(profile.device, non_blocking=True)


def check_labels(labels: torch.Tensor, num_classes: int) -> None:
    """Validate labels in the data pipeline, on the host, before they reach the GPU.

    This is where the lesson moves ``assert target.max() < C`` to: a check on a
    CPU tensor costs no device-to-host synchronisation.
    """
    if labels.device.type != "cpu":
        raise ValueError("check labels before moving them to the device")
    if labels.numel() and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes}); got {labels.min()}..{labels.max()}")
