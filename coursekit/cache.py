"""Keep torch.compile's on-disk cache inside the repository.

Inductor caches compiled kernels (and FX/AOTAutograd graphs) under
``TORCHINDUCTOR_CACHE_DIR``; pointing it at ``<repo>/.cache/inductor`` (git
ignores ``.cache/``) makes the second run of a lesson or of the bench skip
most of the compile time.  ``torch.compiler.reset()`` clears memory, not disk:
delete the folder to see the cold-start cost again.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def repo_root() -> Path:
    """The checkout this package runs from (where ``pyproject.toml`` lives), else the cwd."""
    here = Path(__file__).resolve().parents[1]
    return here if (here / "pyproject.toml").exists() else Path.cwd()


def _torch_default() -> str:
    """The folder importing ``torch._dynamo`` writes into the environment when none was chosen, as torch itself
    works it out (``default_cache_dir``, in every supported release: it cleans the user name, and 2.14 falls back
    to ``uid_<n>``)."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    return default_cache_dir()


def inductor_cache_dir() -> str:
    """The folder Inductor compiles into now: ``TORCHINDUCTOR_CACHE_DIR``, else torch's default. Sets nothing."""
    return os.path.abspath(os.environ.get(CACHE_ENV) or _torch_default())


def use_repo_compile_cache() -> str:
    """Point ``TORCHINDUCTOR_CACHE_DIR`` at ``<repo>/.cache/inductor`` unless the user chose a folder.

    Importing ``torch._dynamo`` fills in torch's own default (a temp folder), so
    that value counts as "not chosen" and is replaced. Call it before the first
    ``torch.compile``; returns the folder in use.
    """
    current = os.environ.get(CACHE_ENV)
    if not current or current == _torch_default():
        os.environ[CACHE_ENV] = str(repo_root() / ".cache" / "inductor")
    return os.environ[CACHE_ENV]


def key_settings() -> dict[str, object]:
    """The global settings Inductor's FX-graph cache key holds that a notebook may change (``FxGraphHashDetails``
    in ``torch/_inductor/codecache.py``; the default dtype from torch 2.14): a graph compiled under other values
    misses the entries compiled under these. ``torch.set_float32_matmul_precision("highest")`` changes the first
    although "highest" is the default (``none`` becomes ``ieee``); cuDNN's TF32 switch is not in the key."""
    import torch

    matmul = torch.backends.cuda.matmul
    return {
        "cuda.matmul.fp32_precision": matmul.fp32_precision,
        "allow_fp16_reduced_precision_reduction": matmul.allow_fp16_reduced_precision_reduction,
        "allow_bf16_reduced_precision_reduction": matmul.allow_bf16_reduced_precision_reduction,
        "deterministic_algorithms": (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
        ),
        "default_dtype": torch.get_default_dtype(),
    }
