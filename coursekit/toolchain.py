"""The one thing ``torch.compile`` needs from the machine beyond Python packages: a C++ compiler.

Inductor builds its CPU kernels with one, and Triton builds a small launcher with one before its first GPU kernel,
so without it every compile of the course fails (``InvalidCxxCompiler``). ``make setup`` and lesson 0 check it
first and say how to install one. ``python -m coursekit.toolchain`` prints the check and exits 1 if it fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

INSTALL_HINT = {
    "linux": "install one: sudo apt-get install g++ (Debian, Ubuntu), sudo dnf install gcc-c++ (Fedora), "
    "or conda install -c conda-forge cxx-compiler",
    "darwin": "install Apple's command line tools: xcode-select --install",
}


def compiler() -> str:
    """The command Inductor calls: ``$CXX``, else ``g++`` (``clang++`` on macOS), as Inductor's own default."""
    return os.environ.get("CXX") or ("clang++" if sys.platform == "darwin" else "g++")


def compiler_problem() -> str | None:
    """Why ``torch.compile`` cannot build kernels here (no working C++ compiler), or None if it can."""
    name = compiler()
    path = shutil.which(name)
    hint = INSTALL_HINT.get(sys.platform, "install a C++ compiler and name it in $CXX")
    if path is None:
        return f"no C++ compiler: {name!r} is not on PATH, and torch.compile needs one to build its kernels; {hint}"
    try:
        subprocess.run([path, "--version"], capture_output=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"the C++ compiler {path} does not run ({type(exc).__name__}); {hint}"
    return None


def compiler_line() -> str:
    """One line for a notebook's first cell: the compiler Inductor will use, or what is wrong and the fix."""
    problem = compiler_problem()
    if problem:
        return f"WARNING: {problem}"
    version = subprocess.run([compiler(), "--version"], capture_output=True, text=True, timeout=30).stdout
    return f"C++ compiler for Inductor: {version.splitlines()[0] if version.strip() else compiler()}"


def main() -> int:
    line = compiler_line()
    print(line)
    return 1 if line.startswith("WARNING") else 0


if __name__ == "__main__":
    raise SystemExit(main())
