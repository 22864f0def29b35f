"""Device profiles: one place decides the device and the problem sizes.

``full`` runs the source article's sizes on a CUDA GPU; ``smoke`` runs small
sizes on CPU so a laptop or CI finishes a lesson in about a minute.

The profile is chosen automatically (a CUDA GPU that Inductor can compile for -> ``full``, else
``smoke``) and can be overridden with environment variables:

* ``COURSEKIT_PROFILE=full|smoke`` picks the sizes;
* ``COURSEKIT_DEVICE=cuda|cpu`` picks the device (default: the profile's).

Inductor generates GPU code with Triton, which needs an NVIDIA GPU of compute capability 7.0 (Volta) or newer: on an
older one (a P100, a GTX 10xx) every ``torch.compile`` of the course would fail, so the automatic choice is the CPU
profile there, with a warning that says why, and asking for ``cuda`` explicitly is an error that says the same.
"""

from __future__ import annotations

import os
import platform
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

PROFILE_ENV = "COURSEKIT_PROFILE"
DEVICE_ENV = "COURSEKIT_DEVICE"


@dataclass(frozen=True)
class Profile:
    """Problem sizes and measurement budget for one kind of machine."""

    name: str
    device: str
    batch_size: int  # images per training step (lesson 1)
    image_size: int  # square images, 3 channels
    num_classes: int
    loss_batch: int  # rows per call when a loss is measured on its own
    loss_classes: int  # classes for the exercise's loss
    steps: int  # timed training steps per measurement
    warmup: int  # untimed calls before timing (compilation happens here)
    trials: int  # interleaved A/B trials for a speed comparison
    threads: int  # CPU threads used while timing (fixed for repeatability)
    min_sample_s: float  # each timed sample runs calls until it lasts at least this long
    vit_batch: int  # images per ViT training step (lessons 3 and 6, exercise 3); each lesson sizes its ViTs
    vit_image: int  # ViT input size (square)
    vit_patch: int  # ViT patch size
    vit_classes: int

    @property
    def device_class(self) -> str:
        """``cuda`` or ``cpu``: the key for device-aware thresholds."""
        return "cuda" if self.device.startswith("cuda") else "cpu"

    def describe(self) -> str:
        """One line naming the profile, device and torch version."""
        return (
            f"profile={self.name} device={device_name(self.device)} "
            f"torch={torch.__version__} batch={self.batch_size} "
            f"image={self.image_size}x{self.image_size} threads={self.threads}"
        )

    def as_dict(self) -> dict:
        """The profile plus device name and torch version, for reports."""
        return {**asdict(self), "device_name": device_name(self.device), "torch": torch.__version__}


PROFILES: dict[str, Profile] = {
    "full": Profile(
        name="full",
        device="cuda",
        batch_size=1024,
        image_size=256,
        num_classes=10,
        loss_batch=8192,
        loss_classes=1000,
        steps=20,
        warmup=5,
        trials=15,
        threads=max(1, min(8, os.cpu_count() or 1)),
        min_sample_s=0.02,
        vit_batch=64,
        vit_image=224,
        vit_patch=16,
        vit_classes=1000,
    ),
    "smoke": Profile(
        name="smoke",
        device="cpu",
        batch_size=32,
        image_size=32,
        num_classes=10,
        loss_batch=512,
        loss_classes=100,
        steps=5,
        warmup=2,
        trials=9,
        threads=1,
        min_sample_s=0.05,
        vit_batch=16,
        vit_image=32,
        vit_patch=8,
        vit_classes=10,
    ),
}


def cpu_model() -> str:
    """The processor's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def device_name(device: str) -> str:
    """A human name for ``device``: the GPU model on CUDA, ``cpu`` otherwise."""
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return "cpu"


TRITON_MIN_CAPABILITY = (7, 0)  # Triton, Inductor's GPU code generator, compiles for Volta and newer


def gpu_too_old(device: str = "cuda") -> str | None:
    """Why Inductor cannot compile for this CUDA GPU (compute capability below 7.0), or None if it can. ROCm GPUs
    are not held to NVIDIA's capability numbers."""
    if torch.version.hip is not None:
        return None
    capability = torch.cuda.get_device_capability(torch.device(device))
    if tuple(capability) >= TRITON_MIN_CAPABILITY:
        return None
    return (
        f"{torch.cuda.get_device_name(torch.device(device))} has compute capability {capability[0]}.{capability[1]}, "
        f"and Triton, which Inductor uses to generate GPU code, needs {TRITON_MIN_CAPABILITY[0]}.0 (Volta) or newer: "
        "torch.compile would fail on it"
    )


def get_profile(name: str | None = None, device: str | None = None) -> Profile:
    """Return the active profile: arguments, then environment, then auto-detect."""
    too_old = gpu_too_old() if torch.cuda.is_available() else None
    usable_gpu = torch.cuda.is_available() and too_old is None
    name = name or os.environ.get(PROFILE_ENV)
    device = device or os.environ.get(DEVICE_ENV)
    if name is None and device is None and torch.cuda.is_available() and not usable_gpu:
        warnings.warn(f"{too_old}; running on the CPU with the smoke profile ({DEVICE_ENV}=cpu)", stacklevel=2)
    name = name or ("full" if usable_gpu else "smoke")
    if name not in PROFILES:
        raise ValueError(f"{PROFILE_ENV}={name!r} is not a profile; choose one of {sorted(PROFILES)}")
    profile = PROFILES[name]
    device = device or profile.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(
            f"profile {name!r} wants device {device!r} but CUDA is not available; "
            f"set {PROFILE_ENV}=smoke (or {DEVICE_ENV}=cpu) to run on CPU"
        )
    if device.startswith("cuda") and too_old:
        raise RuntimeError(f"profile {name!r} wants device {device!r}, but {too_old}; set {DEVICE_ENV}=cpu")
    return replace(profile, device=device)


def apply_threads(profile: Profile) -> None:
    """Fix the CPU thread count so timings repeat (a no-op for GPU kernels)."""
    torch.set_num_threads(profile.threads)


def use_smoke_profile_for_tests() -> None:
    """What the kit's test suites run: the CPU smoke profile whatever the machine, unless the caller set one.
    Both conftests call it before anything reads the profile."""
    os.environ.setdefault(PROFILE_ENV, "smoke")
    os.environ.setdefault(DEVICE_ENV, "cpu")
