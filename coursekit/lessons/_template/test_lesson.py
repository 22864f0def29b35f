"""The lesson's own tests: its material does what the notebook's prose says (pytest finds this file; the CPU
smoke profile is set by ``coursekit/lessons/conftest.py``). Mark what executes notebooks or compiles a lot
``@pytest.mark.slow`` so `make test-fast` skips it, and what times speed ``@pytest.mark.timing``."""

from __future__ import annotations

import torch

from .givens import make_input
from .material import example


def test_example_doubles_the_exercise_input() -> None:
    x = make_input()
    torch.testing.assert_close(example(x), x * 2)
