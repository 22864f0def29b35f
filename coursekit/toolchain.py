"""What ``torch.compile`` needs from the machine beyond Python packages: compilers.

Inductor builds its CPU kernels with a C++ compiler, so without one every compile of the course fails
(``InvalidCxxCompiler``). On a CUDA machine Triton also builds a small launcher before its first GPU kernel, with a
**C** compiler (``$CC``, else ``gcc``, else ``clang``; ``$CXX`` does not reach it), and fails without one ("Failed
to find C compiler"). ``make setup`` and lesson 0 check first and say how to install what is missing.
``python -m coursekit.toolchain`` prints the check and exits 1 if it fails.
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
C_INSTALL_HINT = {
    "linux": "install one: sudo apt-get install gcc (Debian, Ubuntu), sudo dnf install gcc (Fedora), "
    "or conda install -c conda-forge c-compiler; or name one in $CC",
    "darwin": "install Apple's command line tools: xcode-select --install",
}


def compiler() -> str:
    """The command Inductor calls: ``$CXX``, else ``g++`` (``clang++`` on macOS), as Inductor's own default."""
    return os.environ.get("CXX") or ("clang++" if sys.platform == "darwin" else "g++")


def c_compiler() -> str | None:
    """The command Triton calls to build its GPU launcher: ``$CC``, else ``gcc``, else ``clang`` (Triton's order),
    or None where there is none."""
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")


def _gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - no torch yet, or a broken one: no GPU compile to check for
        return False


def _does_not_run(path: str) -> str | None:
    try:
        subprocess.run([path, "--version"], capture_output=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return type(exc).__name__
    return None


def compiler_problem(gpu: bool | None = None) -> str | None:
    """Why ``torch.compile`` cannot build kernels here, or None if it can: no working C++ compiler (Inductor), or,
    where there is a CUDA GPU (``gpu``, default: whether torch sees one), no working C compiler (Triton)."""
    name = compiler()
    path = shutil.which(name)
    hint = INSTALL_HINT.get(sys.platform, "install a C++ compiler and name it in $CXX")
    if path is None:
        return f"no C++ compiler: {name!r} is not on PATH, and torch.compile needs one to build its kernels; {hint}"
    if why := _does_not_run(path):
        return f"the C++ compiler {path} does not run ({why}); {hint}"
    if not (_gpu() if gpu is None else gpu):
        return None
    c_hint = C_INSTALL_HINT.get(sys.platform, "install a C compiler and name it in $CC")
    c_name = c_compiler()
    c_path = shutil.which(c_name) if c_name else None
    if c_path is None:
        named = f"{c_name!r} is not on PATH" if c_name else "neither gcc nor clang is on PATH"
        return f"no C compiler: {named}, and Triton needs one to build its GPU launcher; {c_hint}"
    if why := _does_not_run(c_path):
        return f"the C compiler {c_path} does not run ({why}); Triton needs one for GPU kernels; {c_hint}"
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
