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
