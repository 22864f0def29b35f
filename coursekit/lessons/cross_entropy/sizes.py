"""Lesson 1's steps at a profile's sizes, for ``coursekit.memory``: the toy conv net with SGD and momentum, and the
last rung's large-vocabulary loss (no parameters: its logits and what the loss saves for the backward)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from coursekit.data import fake_cifar_batch
from coursekit.lessons.cross_entropy.vocab import vocab_inputs
from coursekit.memory import Case
from coursekit.models import ToyConvNet
from coursekit.profile import Profile


def _step(profile: Profile):
    model = ToyConvNet(profile.image_size, profile.num_classes).to(profile.device)
    images, labels = fake_cifar_batch(profile, seed=0)
    return model, (images,), lambda logits: F.cross_entropy(logits, labels)


def _vocab_loss(profile: Profile):
    logits, targets = vocab_inputs(profile, seed=0)
    return nn.Identity(), (logits,), lambda out: F.cross_entropy(out, targets)


def cases(profile: Profile) -> list[Case]:
    return [
        Case("training step (toy conv net, batch_size images)", _step, optimizer_slots=1),
        Case("large-vocabulary loss (tokens x classes logits)", _vocab_loss, optimizer_slots=0),
    ]
