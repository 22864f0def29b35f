"""Benchmark results: the header every results document starts with, file names and writing.

Every lesson's bench (``coursekit/lessons/<topic>/bench.py``) builds a JSON document that starts with
:func:`doc_header` (device, torch version, profile, host, time) and writes it with :func:`write_results` as
``<lesson>-<profile>-<device>-torch<version>.{json,md}``, so a figure is never separated from where it was
measured.
"""

from __future__ import annotations

import json
import os
import platform
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import torch

from coursekit.profile import Profile, cpu_model, device_name


def duration(ms: float) -> str:
    """``ms`` milliseconds as ``3.2 ms`` or, from one second up, ``9.6 s``."""
    return f"{ms:.3g} ms" if ms < 1000 else f"{ms / 1000:.3g} s"


def doc_header(profile: Profile, lesson: str) -> dict:
    """What every results document starts with: lesson, device, torch, profile, host and time of the run."""
    return {
        "lesson": lesson,
        "device": profile.device,
        "device_name": device_name(profile.device),
        "torch": torch.__version__,
        "profile": profile.as_dict(),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": {"machine": platform.machine(), "processor": cpu_model(), "cpu_count": _cpu_count()},
    }


def _cpu_count() -> int | None:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def machine_label(doc: dict) -> str:
    """The GPU's name, or for CPU runs the processor model and core count."""
    if doc["device"].startswith("cuda"):
        return doc["device_name"]
    host = doc.get("host", {})
    return f"cpu ({host.get('processor', 'unknown')}, {host.get('cpu_count', '?')} cores)"


def slug(text: str) -> str:
    """Lower-case ``text`` with runs of other characters turned into ``-``."""
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def result_stem(doc: dict) -> str:
    """``<lesson>-<profile>-<device-name-slug>-torch<version-slug>``, e.g. ``lesson01-smoke-cpu-torch2.14.1``."""
    lesson = doc["lesson"]
    return f"{lesson}-{doc['profile']['name']}-{slug(doc['device_name'])}-torch{slug(doc['torch'])}"


def write_results(doc: dict, out_dir: str | Path, markdown: Callable[[dict], str]) -> tuple[Path, Path]:
    """Write ``<stem>.json`` and ``<stem>.md`` (``markdown(doc)``) into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = result_stem(doc)
    json_path, md_path = out / f"{stem}.json", out / f"{stem}.md"
    json_path.write_text(json.dumps(doc, indent=2) + "\n")
    md_path.write_text(markdown(doc))
    return json_path, md_path
