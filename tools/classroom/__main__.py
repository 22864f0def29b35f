"""``python -m tools.classroom COMMAND``: the classroom's command line (``make release``, ``collect``, ``autograde``,
``feedback``, ``export``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import tools.classroom
from tools.classroom.autograde import autograde
from tools.classroom.collect import collect
from tools.classroom.course import course_dir, ensure_course
from tools.classroom.export import export
from tools.classroom.feedback import feedback
from tools.classroom.release import release


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.classroom", description=tools.classroom.__doc__.splitlines()[0]
    )
    parser.add_argument("--course", help="the nbgrader course folder (default: course/ or $COURSE)")
    sub = parser.add_subparsers(dest="command", required=True)
    rel = sub.add_parser("release", help="nbgrader release folder + learner kit zip")
    rel.add_argument(
        "--with-cache",
        nargs="*",
        default=[],
        type=Path,
        help="compile caches from `make warm-cache` to ship in the kit's cache/",
    )
    col = sub.add_parser("collect", help="copy DIR/<student>/**/NN_*.ipynb into submitted/")
    col.add_argument("source", type=Path)
    auto = sub.add_parser("autograde", help="nbgrader autograde with the hidden checks")
    auto.add_argument("--assignment", nargs="*", help="exNN ids (default: all released)")
    auto.add_argument("--jobs", type=int, default=1, help="students graded at once (default 1)")
    auto.add_argument("--force", action="store_true", help="regrade submissions graded before")
    auto.add_argument(
        "--unsandboxed",
        action="store_true",
        help="grade without the sandbox on a machine that has "
        "none (learner code then runs with your rights; every feedback page says so)",
    )
    sub.add_parser("feedback", help="per-student HTML feedback")
    exp = sub.add_parser("export", help="grades.csv and grades_by_check.csv")
    exp.add_argument("--assignment", nargs="*", help="exNN ids (default: every released one)")
    args = parser.parse_args(argv)
    course = course_dir(args.course)
    if args.command == "release":
        release(course, args.with_cache)
    elif args.command == "collect":
        ensure_course(course)
        collect(course, args.source)
    elif args.command == "autograde":
        autograde(course, args.assignment, args.jobs, args.force, args.unsandboxed)
    elif args.command == "feedback":
        feedback(course)
    elif args.command == "export":
        export(course, args.assignment)
    return 0


if __name__ == "__main__":
    sys.exit(main())
