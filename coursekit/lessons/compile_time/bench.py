"""Lesson 6's figures for ``make bench``: cold and warm starts, capture cost against depth, recompiles.

``python -m coursekit.bench --lesson 6`` writes ``bench/results/lesson06-<profile>-<device>-torch<ver>.{json,md}``.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import asdict
from pathlib import Path

from coursekit.lessons.compile_time.material import (
    capture_plan,
    capture_scaling,
    cold_starts,
    lesson_shape,
    timed_hygiene,
)
from coursekit.profile import Profile
from coursekit.results import doc_header, machine_label


def measure_lesson6(profile: Profile) -> dict:
    """Everything lesson 6 measures, as a results document."""
    with tempfile.TemporaryDirectory(prefix="lesson06-") as tmp:
        starts = cold_starts(Path(tmp) / "caches")
    depths, skipped = capture_plan(profile)
    capture = capture_scaling(profile, depths)
    hygiene = timed_hygiene(profile)
    shape = lesson_shape(profile)
    return {
        **doc_header(profile, "lesson06"),
        "model": {"depth": shape.depth, "dim": shape.dim, "heads": shape.heads},
        "cold_starts": {name: asdict(run) for name, run in starts.items()},
        "capture": {"backend": "aot_eager", "depths": depths, "skipped": skipped, **capture},
        "recompile": {kind: asdict(run) for kind, run in hygiene.items()},
    }


def markdown_table(doc: dict) -> str:
    """Three Markdown tables, headed by the device they were measured on."""
    m = doc["model"]
    lines = [
        f"Measured on **{machine_label(doc)}**, profile `{doc['profile']['name']}`, torch {doc['torch']}, "
        f"{doc['created']}. Model: timm ViT, {m['depth']} blocks of width {m['dim']}.",
        "",
        "**First training step in a fresh process** (compile included; Inductor):",
        "",
        "| setting | first step s | second step ms | FX graph hits/misses | AOTAutograd hits |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, r in doc["cold_starts"].items():
        lines.append(
            f"| {name} | {r['first_step_s']:.1f} | {r['second_step_s'] * 1e3:.1f} | "
            f"{r['fx_graph_hits']}/{r['fx_graph_misses']} | {r['aot_hits']} |"
        )
    c = doc["capture"]
    lines += [
        "",
        f"**Capture of the first step** (backend `{c['backend']}`, median of 2, s):",
        "",
        "| blocks | whole model | regional | ratio |",
        "| --- | --- | --- | --- |",
    ]
    for d, w, r in zip(c["depths"], c["whole"], c["regional"]):
        lines.append(f"| {d} | {w:.2f} | {r:.2f} | {w / r:.1f}x |")
    for d, why in c.get("skipped", {}).items():
        lines.append(f"| {d} | skipped: {why} | | |")
    lines += [
        "",
        "**Compiled AdamW + LambdaLR step** (Inductor, caches off): graphs after each step, seconds per step:",
        "",
        "| learning rate | graphs | step s | total s |",
        "| --- | --- | --- | --- |",
    ]
    for kind, r in doc["recompile"].items():
        lines.append(
            f"| {kind} | {r['graphs']} | {', '.join(f'{s:.3g}' for s in r['step_s'])} | {sum(r['step_s']):.1f} |"
        )
    return "\n".join(lines) + "\n"


def print_table(doc: dict) -> None:
    """Print the tables (plain Markdown: they are short)."""
    print(f"lesson 6 on {machine_label(doc)}, profile {doc['profile']['name']}, torch {doc['torch']}")
    print(markdown_table(doc))


def run(profile: Profile, args: argparse.Namespace | None = None) -> dict:
    """The results document of ``python -m coursekit.bench --lesson compile_time``."""
    return measure_lesson6(profile)
