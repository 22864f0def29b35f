"""Instructor and maintainer commands, run from the repository root as ``python -m tools.<name>``."""
