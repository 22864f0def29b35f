"""Write (or, with --check, verify) each exercise's public fixtures: stored inputs and expected values.

Public checks ship in the learner kit and compare with these stored values, so the kit needs no reference
implementation. An exercise takes part when its ``public.py`` defines ``fixture_inputs()`` and its
``reference.py`` defines ``fixture_expected(inputs)``.

    python -m tools.make_fixtures           # write grader/exercises/exNN/fixtures.safetensors
    python -m tools.make_fixtures --check   # exit 1 if a stored fixture differs from a fresh computation
"""

from __future__ import annotations

import argparse
import sys

import safetensors.torch
import torch

from grader.exercises import exercise_ids, part
from grader.judging import fixture_path


def computed(exercise: str) -> dict[str, torch.Tensor] | None:
    public, reference = part(exercise, "public"), part(exercise, "reference")
    if not (hasattr(public, "fixture_inputs") and hasattr(reference, "fixture_expected")):
        return None
    inputs = public.fixture_inputs()
    return {k: v.detach().cpu().contiguous() for k, v in {**inputs, **reference.fixture_expected(inputs)}.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="verify instead of writing")
    args = parser.parse_args(argv)
    stale = []
    for exercise in exercise_ids():
        fresh = computed(exercise)
        if fresh is None:
            continue
        path = fixture_path(exercise)
        if args.check:
            stored = safetensors.torch.load_file(str(path)) if path.is_file() else {}
            same = stored.keys() == fresh.keys() and all(
                stored[k].dtype == fresh[k].dtype
                and torch.allclose(stored[k].double(), fresh[k].double(), rtol=1e-12, atol=1e-12)
                for k in fresh
            )
            if not same:
                stale.append(str(path))
            continue
        safetensors.torch.save_file(
            fresh, str(path), metadata={"generated_by": "tools/make_fixtures.py", "torch": torch.__version__}
        )
        print(f"wrote {path} ({len(fresh)} tensors)")
    if stale:
        print("stale fixtures (run `make fixtures`): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
