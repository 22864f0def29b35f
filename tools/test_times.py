"""Where `make test`'s time goes: a duration table from the JUnit files it writes (reports/tests-*.xml).

    python -m tools.test_times [--top 25] [--lessons] [--passes parallel,timing]

By default it reads `make test`'s two passes (``tests-parallel.xml``, ``tests-timing.xml``); ``--passes compat``
reads `make test-compat`'s, ``--passes browser`` `make test-browser`'s. The compat pass runs many of the same tests
(the reference gradings, the lessons' own tests) under the same ids: adding it in would count them twice.

``--lessons`` prints, per lesson, the minutes its slow tests took (its exercise graded and its own tests in
`make test`, its notebooks executed in `make test-compat`), the figure each
``coursekit/lessons/<topic>/lesson.toml`` keeps as ``test_minutes``.
"""

from __future__ import annotations

import argparse
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _file(classname: str) -> str:
    """``test_grader`` for ``tests.test_grader``; ``distillation/test_lesson`` for a lesson's own tests."""
    parts = classname.split(".")
    return "/".join(parts[2:]) if parts[:2] == ["coursekit", "lessons"] else parts[-1]


MAKE_TEST = ("parallel", "timing")  # make test's passes, as its --junitxml names them


def durations(folder: Path = ROOT / "reports", passes: tuple[str, ...] = MAKE_TEST) -> dict[str, float]:
    """``{test id: seconds}`` from ``folder/tests-<pass>.xml`` for each of ``passes`` that exists."""
    found: dict[str, float] = {}
    for path in (folder / f"tests-{name}.xml" for name in passes):
        if not path.is_file():
            continue
        for case in ET.parse(path).getroot().iter("testcase"):
            name = f"{_file(case.get('classname', ''))}::{case.get('name')}"
            found[name] = found.get(name, 0.0) + float(case.get("time") or 0.0)
    return found


def lesson_minutes(times: dict[str, float]) -> dict[int, float]:
    """Minutes per lesson number: its notebooks executed, its exercise's gradings (test ids naming it) and its
    own tests (``<topic>/test_lesson``)."""
    from coursekit.lessons import lessons

    numbers = {lesson.topic: lesson.number for lesson in lessons()}
    per: dict[int, float] = defaultdict(float)
    for name, seconds in times.items():
        found = re.search(r"\[(?:notebooks|solutions)/(\d\d)_|\[ex(\d\d)", name)
        topic = name.split("/", 1)[0] if "/test_lesson::" in name else None
        if found:
            per[int(found.group(1) or found.group(2))] += seconds / 60
        elif topic in numbers:
            per[numbers[topic]] += seconds / 60
    return dict(sorted(per.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--lessons", action="store_true")
    parser.add_argument("--passes", default=",".join(MAKE_TEST), help="which reports/tests-<pass>.xml to read")
    args = parser.parse_args(argv)
    passes = tuple(p.strip() for p in args.passes.split(",") if p.strip())
    times = durations(ROOT / "reports", passes)
    if not times:
        wanted = ", ".join(f"reports/tests-{p}.xml" for p in passes)
        raise SystemExit(f"none of {wanted} exists: run `make test` (or the pass you named) first")
    total = sum(times.values())
    by_file: dict[str, float] = defaultdict(float)
    for name, seconds in times.items():
        by_file[name.split("::")[0]] += seconds
    print(f"{len(times)} tests in {', '.join(passes)}, {total / 60:.1f} min of test time (summed over processes)\n")
    print("| file | min | share |\n|---|---|---|")
    for file, seconds in sorted(by_file.items(), key=lambda kv: -kv[1]):
        print(f"| {file} | {seconds / 60:.1f} | {seconds / total:.0%} |")
    print(f"\n| slowest {args.top} tests | s |\n|---|---|")
    for name, seconds in sorted(times.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"| `{name}` | {seconds:.0f} |")
    if args.lessons:  # the notebooks execute in the compat pass only: its runs of them count, nothing else of it
        executed = {k: v for k, v in durations(ROOT / "reports", ("compat",)).items() if "executes_top_to_bottom" in k}
        print("\n| lesson | test_minutes |\n|---|---|")
        for number, minutes in lesson_minutes({**executed, **times}).items():
            print(f"| {number} | {minutes:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
