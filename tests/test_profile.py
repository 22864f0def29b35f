"""Profiles are auto-detected and overridable by environment variables."""

from __future__ import annotations

import pytest

from coursekit.profile import PROFILES, get_profile


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COURSEKIT_PROFILE", "smoke")
    monkeypatch.setenv("COURSEKIT_DEVICE", "cpu")
    p = get_profile()
    assert (p.name, p.device, p.device_class) == ("smoke", "cpu", "cpu")
    assert "profile=smoke" in p.describe() and "torch=" in p.describe()


def test_unknown_profile_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COURSEKIT_PROFILE", "huge")
    with pytest.raises(ValueError, match="not a profile"):
        get_profile()


def test_full_profile_is_the_articles_size() -> None:
    full = PROFILES["full"]
    assert (full.batch_size, full.image_size, full.device) == (1024, 256, "cuda")


def test_asking_for_cuda_without_it_says_how_to_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(RuntimeError, match="COURSEKIT_PROFILE=smoke"):
        get_profile("full", "cuda")


def _old_gpu(
    monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int], arch_list: tuple[str, ...] = ("sm_70", "sm_80")
) -> None:
    """Pretend this machine has one CUDA GPU of ``capability``, and torch a build for ``arch_list`` (nothing touches
    a real device)."""
    import torch

    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: list(arch_list))
    monkeypatch.delenv("COURSEKIT_PROFILE", raising=False)
    monkeypatch.delenv("COURSEKIT_DEVICE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "NVIDIA GeForce GTX 1080")
    monkeypatch.setattr(torch.version, "hip", None)


def test_a_gpu_too_old_for_triton_falls_back_to_the_cpu_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inductor's Triton needs compute capability 7.0: on a Pascal GPU the automatic choice is the CPU profile,
    with a warning, and asking for cuda is an error that names the GPU and the fix."""
    _old_gpu(monkeypatch, (6, 1))
    with pytest.warns(UserWarning, match=r"GTX 1080 has compute capability 6\.1.*needs 7\.0.*COURSEKIT_DEVICE=cpu"):
        p = get_profile()
    assert (p.name, p.device) == ("smoke", "cpu")
    for name, device in (("full", None), ("smoke", "cuda")):
        with pytest.raises(RuntimeError, match=r"capability 6\.1.*set COURSEKIT_DEVICE=cpu"):
            get_profile(name, device)
    assert get_profile("full", "cpu").device == "cpu"


def test_a_volta_or_newer_gpu_gets_the_full_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    import warnings

    _old_gpu(monkeypatch, (7, 0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = get_profile()
    assert (p.name, p.device) == ("full", "cuda")


def test_a_gpu_this_torch_build_has_no_kernels_for_falls_back_to_the_cpu_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PyTorch's CUDA 13 wheels (the pinned torch's) hold kernels for 7.5 and newer: a V100 (7.0) passes Triton's
    floor, then would fail at its first CUDA op. The automatic choice is the CPU, with the reason."""
    from coursekit.profile import build_runs_on

    cu130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    assert not build_runs_on((7, 0), cu130) and not build_runs_on((8, 0), ["sm_86"])
    assert build_runs_on((8, 9), cu130) and build_runs_on((9, 0), ["sm_90a"]) and build_runs_on((7, 0), [])
    assert build_runs_on((12, 1), ["sm_80", "compute_90"]) and not build_runs_on((8, 6), ["compute_90"])
    _old_gpu(monkeypatch, (7, 0), tuple(cu130))
    with pytest.warns(UserWarning, match=r"capability 7\.0, and this torch build .* holds GPU kernels for sm_75, "):
        p = get_profile()
    assert (p.name, p.device) == ("smoke", "cpu")
    with pytest.raises(RuntimeError, match=r"get_arch_list\(\) covers it \(for Volta.*set COURSEKIT_DEVICE=cpu"):
        get_profile("full", "cuda")
    _old_gpu(monkeypatch, (9, 0), tuple(cu130))
    assert get_profile().name == "full"
