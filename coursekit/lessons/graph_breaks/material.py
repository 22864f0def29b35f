"""Lesson 2's models: a small conv net with five graph breaks, and the fixes one at a time.

``BrokenNet`` follows the "DumbNet" of the source article (a conv net whose
forward mixes in ordinary Python), plus one more habit: calling a NumPy
function Dynamo cannot trace.  Each later variant removes one habit:

* ``print`` of a debug line: Dynamo cannot put I/O in a graph -> drop it, or log
  outside the compiled step (``log_activations`` shows ``torch.compiler.disable``);
* ``np.interp`` on the activations: opaque to Dynamo -> wrap it as a custom op
  (``calibrated_gate``), which the graph calls as one opaque node;
* ``.item()`` stored in a Python dict: a host read -> keep the statistic as a
  tensor (a buffer) and read it only when logging;
* ``assert`` on tensor data and a ``for`` over ``np.arange``: Dynamo on torch
  2.14 traces both (the assert becomes an async assert in the graph), but the
  assert is a device-to-host sync in eager mode -> validate inputs outside the
  step (``check_images``) and shapes with ``torch._check``; loop over ``range``.

The custom op is called on detached activations (as ``BrokenNet`` does), so it
needs no backward formula.

All variants have the same layers (same ``state_dict``, non-persistent buffers
only) and compute the same outputs and gradients; the tests check it.
"""

from __future__ import annotations

import io
import zlib

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function

from coursekit.profile import Profile

# The calibration table: a piecewise-linear gate in [0, 1], applied as x * gate(x).
GATE_XP = (-3.0, -1.0, 0.0, 1.0, 3.0)
GATE_FP = (0.0, 0.1, 0.5, 0.9, 1.0)


class LastLine(io.TextIOBase):
    """A text stream that keeps only the last line written: a debug log that never grows."""

    def __init__(self) -> None:
        super().__init__()
        self.last = ""

    def write(self, text: str) -> int:
        if text.strip():
            self.last = text.rstrip("\n")
        return len(text)


DEBUG_LOG = LastLine()  # where the debug prints go, so a timing loop does not flood the notebook


def numpy_gate(x: torch.Tensor) -> torch.Tensor:
    """``np.interp`` of ``x`` through the calibration table, as a tensor like ``x`` (no gradient)."""
    gate = np.interp(x.detach().cpu().numpy(), GATE_XP, GATE_FP)
    return torch.from_numpy(gate).to(device=x.device, dtype=x.dtype)


@torch.library.custom_op("lesson02::calibrated_gate", mutates_args=())
def calibrated_gate(x: torch.Tensor) -> torch.Tensor:
    """The NumPy calibration as an op: compiled code calls it as one opaque node, no break.

    Its host round trip (``.cpu().numpy()`` and back) is the op's known price; the
    ``record_function`` label lets ``watch_traffic(allow_inside=("lesson02::",))``
    tell it apart from traffic elsewhere, in eager and in compiled code alike.
    """
    with record_function("lesson02::calibrated_gate"):
        return numpy_gate(x)


@calibrated_gate.register_fake
def shaped_like_input(x: torch.Tensor) -> torch.Tensor:
    # What the compiler needs to trace around the op: the output's shape, dtype and device.
    return torch.empty_like(x)


def numpy_gate_slope(x: torch.Tensor) -> torch.Tensor:
    """The calibration table's slope at ``x`` (0 outside the table): the derivative of ``numpy_gate``."""
    xs = x.detach().cpu().numpy()
    slopes = np.diff(GATE_FP) / np.diff(GATE_XP)
    segment = np.clip(np.searchsorted(GATE_XP, xs, side="right") - 1, 0, len(slopes) - 1)
    inside = (xs >= GATE_XP[0]) & (xs <= GATE_XP[-1])
    return torch.from_numpy(np.where(inside, slopes[segment], 0.0)).to(device=x.device, dtype=x.dtype)


@torch.library.custom_op("lesson02::gate_slope", mutates_args=())
def gate_slope(x: torch.Tensor) -> torch.Tensor:
    """The slope as an op of its own: the backward below runs inside compiled code too."""
    with record_function("lesson02::gate_slope"):
        return numpy_gate_slope(x)


gate_slope.register_fake(shaped_like_input)  # the same fake: an output shaped like x


@torch.library.custom_op("lesson02::trainable_gate", mutates_args=())
def trainable_gate(x: torch.Tensor) -> torch.Tensor:
    """``calibrated_gate`` that gradients flow through: the same values, with a backward registered."""
    with record_function("lesson02::trainable_gate"):
        return numpy_gate(x)


trainable_gate.register_fake(shaped_like_input)  # the same fake: an output shaped like x


def gate_setup_context(ctx, inputs: tuple[torch.Tensor], output: torch.Tensor) -> None:
    ctx.save_for_backward(inputs[0])  # what the backward needs, saved when the forward runs


def gate_backward(ctx, grad: torch.Tensor) -> torch.Tensor:
    (x,) = ctx.saved_tensors
    return grad * gate_slope(x)  # AOTAutograd traces this too: it may call only traceable code and ops


trainable_gate.register_autograd(gate_backward, setup_context=gate_setup_context)


def rescale_if_large(x: torch.Tensor, limit: float = 4.0) -> torch.Tensor:
    """Scale ``x`` down to norm ``limit`` when it is longer: a Python branch on a tensor's value."""
    if x.norm() > limit:
        return x * (limit / x.norm())
    return x


def rescale_with_cond(x: torch.Tensor, limit: float = 4.0) -> torch.Tensor:
    """The same with ``torch.cond``: both branches are traced, and the graph picks one at run time."""
    return torch.cond(x.norm() > limit, lambda x: x * (limit / x.norm()), lambda x: x.clone(), (x,))


def hashed_row(table: torch.Tensor, feature: str) -> torch.Tensor:
    """The hashing trick: a feature's name, hashed by a C function (``zlib.crc32``), picks a row of ``table``."""
    return table[zlib.crc32(feature.encode()) % table.shape[0]]


traced_hashed_row = torch._dynamo.nonstrict_trace(hashed_row)  # also torch.compiler.nonstrict_trace on newer torch


def scores_with_feature(x: torch.Tensor, table: torch.Tensor, feature: str) -> torch.Tensor:
    """Scores plus a hashed feature's learned bias: Dynamo breaks at ``zlib.crc32``."""
    return (x + hashed_row(table, feature)).relu()


def scores_with_traced_feature(x: torch.Tensor, table: torch.Tensor, feature: str) -> torch.Tensor:
    """The same through ``traced_hashed_row``: Dynamo records one call, AOTAutograd traces into it."""
    return (x + traced_hashed_row(table, feature)).relu()


@torch.compiler.disable
def log_activations(name: str, x: torch.Tensor, log: io.TextIOBase = DEBUG_LOG) -> None:
    """A logging helper kept eager on purpose: Dynamo skips it (one explicit graph break)."""
    print(f"{name}: shape={tuple(x.shape)} mean={x.mean().item():.4f}", file=log)


def check_images(images: torch.Tensor) -> None:
    """Validate a batch in the data pipeline, outside the compiled step (on the host: no sync)."""
    if images.dim() != 4 or images.shape[1] != 3:
        raise ValueError(f"expected images shaped (N, 3, H, W), got {tuple(images.shape)}")
    if not bool(torch.isfinite(images).all()):
        raise ValueError("images contain NaN or inf")


class LessonNet(nn.Module):
    """The layers every variant shares: two conv blocks, then four linear layers (``fc3`` used twice)."""

    def __init__(self, num_classes: int = 10, width: int = 64, repeats: int = 2) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.pool = nn.AvgPool2d(2)  # average pooling: a plain, cheap layer, so the breaks set the step time
        self.squeeze = nn.AdaptiveAvgPool2d(4)  # any image size >= 16 ends as 16 x 4 x 4 features
        self.fc1 = nn.Linear(16 * 4 * 4, width)
        self.fc2 = nn.Linear(width, width)
        self.fc3 = nn.Linear(width, width)
        self.fc4 = nn.Linear(width, num_classes)
        self.repeats = repeats
        self.register_buffer("fc1_mean", torch.zeros(()), persistent=False)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Conv, ReLU, 2x2 average pool, twice; then a fixed 4x4 grid, flattened."""
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        return torch.flatten(self.squeeze(x), 1)


class BrokenNet(LessonNet):
    """Five habits from eager-mode code, each a graph break on some torch release."""

    def __init__(self, num_classes: int = 10, width: int = 64, repeats: int = 2) -> None:
        super().__init__(num_classes, width, repeats)
        self.stats: dict[str, float] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert torch.isfinite(x).all(), "non-finite input"  # 1. assert on tensor data
        x = F.relu(self.fc1(self.features(x)))
        self.stats["fc1-mean"] = x.mean().item()  # 2. .item() into a Python dict
        x = F.relu(self.fc2(x))
        for _ in np.arange(self.repeats):  # 3. a loop over a NumPy range
            x = F.relu(self.fc3(x))
        print(f"fc3 out: {tuple(x.shape)}", file=DEBUG_LOG)  # 4. a debug print
        x = x * torch.from_numpy(np.interp(x.detach().cpu().numpy(), GATE_XP, GATE_FP)).to(x)  # 5. NumPy
        return self.fc4(x)


class NoPrintNet(BrokenNet):
    """Fix 1: the debug print is gone (log outside the compiled step, if at all)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert torch.isfinite(x).all(), "non-finite input"
        x = F.relu(self.fc1(self.features(x)))
        self.stats["fc1-mean"] = x.mean().item()
        x = F.relu(self.fc2(x))
        for _ in np.arange(self.repeats):
            x = F.relu(self.fc3(x))
        x = x * torch.from_numpy(np.interp(x.detach().cpu().numpy(), GATE_XP, GATE_FP)).to(x)
        return self.fc4(x)


class CustomOpNet(BrokenNet):
    """Fix 2: the NumPy call runs inside the custom op ``lesson02::calibrated_gate``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert torch.isfinite(x).all(), "non-finite input"
        x = F.relu(self.fc1(self.features(x)))
        self.stats["fc1-mean"] = x.mean().item()
        x = F.relu(self.fc2(x))
        for _ in np.arange(self.repeats):
            x = F.relu(self.fc3(x))
        return self.fc4(x * calibrated_gate(x.detach()))


class BufferStatsNet(LessonNet):
    """Fix 3: the statistic stays a tensor, in a buffer; ``stats()`` reads it when you log."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert torch.isfinite(x).all(), "non-finite input"
        x = F.relu(self.fc1(self.features(x)))
        with torch.no_grad():
            self.fc1_mean.copy_(x.mean())
        x = F.relu(self.fc2(x))
        for _ in np.arange(self.repeats):
            x = F.relu(self.fc3(x))
        return self.fc4(x * calibrated_gate(x.detach()))

    def stats(self) -> dict[str, float]:
        """The last step's statistics as Python floats: one host read, when you choose to log."""
        return {"fc1-mean": self.fc1_mean.item()}


class FixedNet(BufferStatsNet):
    """Fix 4: shapes checked with ``torch._check`` (free), values by ``check_images`` outside; ``range``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._check(x.dim() == 4 and x.shape[1] == 3, lambda: "expected images shaped (N, 3, H, W)")
        x = F.relu(self.fc1(self.features(x)))
        with torch.no_grad():
            self.fc1_mean.copy_(x.mean())
        x = F.relu(self.fc2(x))
        for _ in range(self.repeats):
            x = F.relu(self.fc3(x))
        return self.fc4(x * calibrated_gate(x.detach()))


class LoggedNet(FixedNet):
    """``FixedNet`` plus a logging call kept eager with ``torch.compiler.disable``: one deliberate break."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._check(x.dim() == 4 and x.shape[1] == 3, lambda: "expected images shaped (N, 3, H, W)")
        x = F.relu(self.fc1(self.features(x)))
        log_activations("fc1", x)
        x = F.relu(self.fc2(x))
        for _ in range(self.repeats):
            x = F.relu(self.fc3(x))
        return self.fc4(x * calibrated_gate(x.detach()))


VARIANTS: dict[str, type[LessonNet]] = {
    "0 broken": BrokenNet,
    "1 no print": NoPrintNet,
    "2 custom op": CustomOpNet,
    "3 stats buffer": BufferStatsNet,
    "4 fixed": FixedNet,
}


def build(name: str, profile: Profile, seed: int = 0) -> LessonNet:
    """Variant ``name`` (a key of ``VARIANTS``, or ``"logged"``) with seeded weights, on the profile's device."""
    cls = LoggedNet if name == "logged" else VARIANTS[name]
    torch.manual_seed(seed)  # the same seed gives every variant the same weights
    return cls(num_classes=profile.num_classes).to(profile.device)
