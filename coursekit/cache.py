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
