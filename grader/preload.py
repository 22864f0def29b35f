"""Imported once by the grader's fork server (``grader.worker_start.worker_context``): every grading worker forked
from it starts with torch, timm, the course package, the loader and every exercise's probes imported, so
the sandboxed worker never needs to read the grader's files.

Importing is all it does: no tensor is made, no device is touched, nothing is compiled.
"""

import timm  # noqa: F401
import torch  # noqa: F401

import coursekit.profile  # noqa: F401
import coursekit.traffic  # noqa: F401
import grader.loader  # noqa: F401
import grader.notebook  # noqa: F401
import grader.numerics  # noqa: F401
import grader.probing  # noqa: F401
import grader.protocol  # noqa: F401
import grader.sandbox  # noqa: F401
import grader.worker  # noqa: F401
from grader.exercises import exercise_ids, part

for _exercise in exercise_ids():
    part(_exercise, "probes")
