"""Show code from ``coursekit`` inside a notebook.

Lessons display the shared implementations (the ladder rungs, the training
step) instead of re-defining them, so there is one source of truth.
"""

from __future__ import annotations

import inspect
import textwrap

from IPython.display import Code


def source(obj: object) -> Code:
    """``obj``'s source (a class, function or method), syntax-highlighted in a notebook."""
    return Code(textwrap.dedent(inspect.getsource(obj)), language="python")
