"""Where `make test`'s time goes: a duration table from the JUnit files it writes (reports/tests-*.xml).

    python -m tools.test_times [--top 25] [--lessons]

``--lessons`` prints, per lesson, the minutes its slow tests took (its notebooks executed and its exercise
graded), the figure each ``coursekit/lessons/<topic>/lesson.toml`` keeps as ``test_minutes``.
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


def durations(folder: Path = ROOT / "reports") -> dict[str, float]:
    """``{test id: seconds}`` from every ``tests-*.xml`` in ``folder``."""
    found: dict[str, float] = {}
    for path in sorted(folder.glob("tests-*.xml")):
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
    args = parser.parse_args(argv)
    times = durations()
    if not times:
        raise SystemExit("no reports/tests-*.xml: run `make test` first")
    total = sum(times.values())
    by_file: dict[str, float] = defaultdict(float)
    for name, seconds in times.items():
        by_file[name.split("::")[0]] += seconds
    print(f"{len(times)} tests, {total / 60:.1f} min of test time (summed over processes)\n")
    print("| file | min | share |\n|---|---|---|")
    for file, seconds in sorted(by_file.items(), key=lambda kv: -kv[1]):
        print(f"| {file} | {seconds / 60:.1f} | {seconds / total:.0%} |")
    print(f"\n| slowest {args.top} tests | s |\n|---|---|")
    for name, seconds in sorted(times.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"| `{name}` | {seconds:.0f} |")
    if args.lessons:
        print("\n| lesson | test_minutes |\n|---|---|")
        for number, minutes in lesson_minutes(times).items():
            print(f"| {number} | {minutes:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
