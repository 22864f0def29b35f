"""Imported once by the grader's fork server (``grader.runner.worker_context``): every grading process
forked from it starts with torch, timm, the course package and the registered checks already imported.

Importing is all it does: no tensor is made, no device is touched, nothing is compiled.
"""

import timm
import torch

import coursekit.cache
import coursekit.profile
import grader.context
import grader.integrity
import grader.interface
import grader.loader
import grader.results
import grader.scan
import grader.worker
from grader.registry import load_all

load_all()
