"""Before a large install: stop at once, with the numbers, where the disk cannot hold it.

``make setup`` installs about 6.4 GiB into ``.venv`` (torch with its CUDA libraries) and ``make test-compat`` about
5.1 GiB into ``.venv-compat`` (measured on x86_64 Linux, torch 2.14.1 and 2.11.0). A disk that fills half-way
leaves a broken environment and pip's ``[Errno 28] No space left on device`` after minutes of downloads. Standard
library only: it runs before the environment exists.

``python3 -m tools.disk_room FOLDER GIB WHAT [HINT]`` exits 1, saying so (and ``HINT``, another way out), if the
disk that will hold ``FOLDER`` has less than ``GIB`` GiB free. The learner kit ships this file for its own
``make setup``.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

GIB = 1024**3


def existing_parent(folder: Path) -> Path:
    """``folder``, or the nearest folder above it that exists (where it will be made)."""
    folder = folder.resolve()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def problem(folder: Path, need_gib: float, what: str, hint: str = "") -> str | None:
    """Why ``what`` will not fit in ``folder``'s disk, or None; ``hint`` is one more way out, if any."""
    free = shutil.disk_usage(existing_parent(folder)).free
    if free >= need_gib * GIB:
        return None
    return (
        f"{what} needs about {need_gib:g} GiB free on the disk that holds {folder}, and only {free / GIB:.1f} GiB is "
        f"free. Free some space (pip's download cache: python3 -m pip cache purge), or put the environment on a "
        f"larger disk (make setup VENV=/path/to/.venv)" + (f"; {hint}" if hint else "")
    )


def main(argv: list[str] | None = None) -> int:
    folder, need, what, *hint = (argv if argv is not None else sys.argv[1:])[:4]
    if why := problem(Path(folder), float(need), what, *hint):
        print(f"error: {why}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
