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


def use_repo_compile_cache() -> str:
    """Set ``TORCHINDUCTOR_CACHE_DIR`` to ``<repo>/.cache/inductor`` unless already set.

    Call it before the first ``torch.compile`` runs; returns the folder in use.
    """
    return os.environ.setdefault(CACHE_ENV, str(repo_root() / ".cache" / "inductor"))
