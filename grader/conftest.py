"""pytest front end: ``pytest grader --submission PATH`` runs every check as a test."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--submission",
        default="exercises",
        type=Path,
        help="a submission notebook or a folder of them (default: exercises/)",
    )
