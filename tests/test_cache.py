"""coursekit.cache recognises the folder torch fills in by itself, so that it can replace it with the repository's."""

from __future__ import annotations

import os
import subprocess
import sys

from coursekit.cache import CACHE_ENV, _torch_default


def test_the_folder_torch_fills_in_is_the_one_the_kit_takes_for_torchs_default() -> None:
    env = {k: v for k, v in os.environ.items() if k != CACHE_ENV}
    code = f"import os, torch._dynamo; print(os.environ.get({CACHE_ENV!r}, ''))"
    filled = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert filled.stdout.strip() == _torch_default()
