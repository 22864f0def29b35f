"""Warnings during an in-notebook check reach stdout, never stderr (which nbgrader would score as a failure)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_every_kind_of_stderr_write_is_rerouted_to_stdout() -> None:
    script = textwrap.dedent("""
        import logging, os, sys, warnings
        logging.basicConfig()  # a root handler bound to sys.stderr, as libraries set up
        from grader.quiet import stderr_to_stdout
        with stderr_to_stdout():
            warnings.warn("from-warnings")
            logging.getLogger("lib").warning("from-logging")
            sys.stderr.write("from-sys-stderr\\n")
            os.write(2, b"from-fd-2\\n")
        sys.stderr.write("after-the-block\\n")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for marker in ("from-warnings", "from-logging", "from-sys-stderr", "from-fd-2"):
        assert marker in proc.stdout and marker not in proc.stderr, (marker, proc.stdout, proc.stderr)
    assert proc.stderr.strip() == "after-the-block"
