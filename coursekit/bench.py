"""Measure the lessons' figures and record them: ``python -m coursekit.bench [--out DIR] [--lesson N|all]``.

Each lesson with ``bench = true`` in its manifest has a ``bench.py`` (``coursekit/lessons/<topic>/``) whose
``run(profile, args)`` returns a results document, written by :func:`coursekit.results.write_results` as JSON
and Markdown named after the device and torch version. The lessons are discovered, never listed here.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from coursekit.cache import use_repo_compile_cache
from coursekit.lessons import lessons
from coursekit.profile import get_profile
from coursekit.results import write_results


def main(argv: Sequence[str] | None = None) -> int:
    use_repo_compile_cache()  # before any bench imports torch._dynamo, which pins the default cache folder
    benches = {str(lesson.number): lesson for lesson in lessons() if lesson.bench}
    parser = argparse.ArgumentParser(prog="python -m coursekit.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results", help="folder for the .json and .md (default: %(default)s)")
    parser.add_argument(
        "--lesson", choices=[*benches, "all"], default="all", help="which lesson to measure (default: %(default)s)"
    )
    modules = {number: lesson.module("bench") for number, lesson in benches.items()}
    for module in modules.values():
        if hasattr(module, "add_arguments"):
            module.add_arguments(parser)
    args = parser.parse_args(argv)
    profile = get_profile()
    print(profile.describe())
    for number, module in modules.items():
        if args.lesson in (number, "all"):
            doc = module.run(profile, args)
            module.print_table(doc)
            for path in write_results(doc, args.out, module.markdown_table):
                print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
