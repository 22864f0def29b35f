"""Device profiles: one place decides the device and the problem sizes.

``full`` runs the source article's sizes on a CUDA GPU; ``smoke`` runs small
sizes on CPU so a laptop or CI finishes a lesson in about a minute.

The profile is chosen automatically (a CUDA GPU that Inductor can compile for -> ``full``, else
``smoke``) and can be overridden with environment variables:

* ``COURSEKIT_PROFILE=full|smoke`` picks the sizes;
* ``COURSEKIT_DEVICE=cuda|cpu`` picks the device (default: the profile's).

Inductor generates GPU code with Triton, which needs an NVIDIA GPU of compute capability 7.0 (Volta) or newer: on an
older one (a P100, a GTX 10xx) every ``torch.compile`` of the course would fail, so the automatic choice is the CPU
profile there, with a warning that says why, and asking for ``cuda`` explicitly is an error that says the same. The
same holds for a GPU this torch build has no kernels for (``torch.cuda.get_arch_list()``): PyTorch's CUDA 13 wheels,
the pinned torch's, start at compute capability 7.5, so a V100 (7.0) needs another build.
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


def build_runs_on(capability: tuple[int, int], arch_list: list[str]) -> bool:
    """Whether a torch build compiled for ``arch_list`` (``torch.cuda.get_arch_list()``) has kernels a GPU of
    ``capability`` can load: machine code for its major version at or below its minor (``sm_86`` runs on 8.9, not
    on 8.0 or 9.0), or PTX (``compute_XY``) at or below it, which the driver compiles. An empty list says nothing."""
    if not arch_list:
        return True
    for arch in arch_list:
        kind, _, number = arch.partition("_")
        digits = number.rstrip("abcdefghijklmnopqrstuvwxyz")  # sm_90a, sm_100f: the same machine code family
        if not digits.isdigit() or len(digits) < 2:
            continue
        built = (int(digits[:-1]), int(digits[-1]))
        if kind == "sm" and built[0] == capability[0] and built[1] <= capability[1]:
            return True
        if kind == "compute" and built <= tuple(capability):
            return True
    return False


def gpu_too_old(device: str = "cuda") -> str | None:
    """Why this CUDA GPU cannot run the course, or None if it can: Inductor's Triton needs compute capability 7.0,
    and this torch build must hold kernels for it. ROCm GPUs are not held to NVIDIA's capability numbers."""
    if torch.version.hip is not None:
        return None
    capability = tuple(torch.cuda.get_device_capability(torch.device(device)))
    name = torch.cuda.get_device_name(torch.device(device))
    if capability < TRITON_MIN_CAPABILITY:
        return (
            f"{name} has compute capability {capability[0]}.{capability[1]}, and Triton, which Inductor uses to "
            f"generate GPU code, needs {TRITON_MIN_CAPABILITY[0]}.0 (Volta) or newer: torch.compile would fail on it"
        )
    arch_list = torch.cuda.get_arch_list()
    if build_runs_on(capability, arch_list):
        return None
    return (
        f"{name} has compute capability {capability[0]}.{capability[1]}, and this torch build ({torch.__version__}, "
        f"CUDA {torch.version.cuda}) holds GPU kernels for {', '.join(arch_list)} only: its first CUDA op would fail "
        "with 'no kernel image is available'. Install a torch build whose torch.cuda.get_arch_list() covers it "
        "(for Volta, PyTorch's CUDA 12.6 builds: the README says how)"
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
