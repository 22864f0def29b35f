"""Lesson 6: where compile time goes, measured.

* ``probe``: one cold or warm first training step in a **fresh process** (a compile cache lives on disk and
  in memory; only a new process shows what a new run of your script pays). It can point Inductor at a given
  cache folder, load mega-cache artifacts before compiling, and save them afterwards.
* ``capture_scaling``: the capture cost (Dynamo + AOTAutograd) of the whole model against regional
  compilation, over depths, in this process.
* ``lr_hygiene``: a compiled optimizer + LR scheduler step with the learning rate as a float or a tensor:
  graphs compiled after each step, and each step's time.

Run ``python -m coursekit.lessons.compile_time.material --how whole --cache-dir DIR`` to see one probe's JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from torch import nn

from coursekit.lessons import lesson
from coursekit.models import ViTShape, image_batch, make_vit
from coursekit.profile import Profile, apply_threads, get_profile
from coursekit.timing import synchronize

HOWS = ("whole", "regional")


def lesson_shape(profile: Profile) -> ViTShape:
    """The lesson's ViT on ``profile`` (ViT-B/16 on ``full``), from its manifest's ``[sizes.<profile>]``."""
    return ViTShape(**lesson("compile_time").sizes_for(profile.name)["vit"])


def capture_depths(profile: Profile) -> list[int]:
    """The depths whose capture cost section 2 measures on ``profile`` (its manifest's ``capture_depths``)."""
    return list(lesson("compile_time").sizes_for(profile.name)["capture_depths"])


def capture_plan(profile: Profile) -> tuple[list[int], dict[int, str]]:
    """``capture_depths`` that fit this device, and why each other one is left out: on a GPU, a depth whose
    forward and backward (estimated on the meta device, with headroom) needs more memory than is free now."""
    if profile.device_class != "cuda":
        return capture_depths(profile), {}
    from coursekit.lessons.compile_time.sizes import capture_case
    from coursekit.memory import estimate, need_gib, shortfall

    fit, skipped = [], {}
    for depth in capture_depths(profile):
        why = shortfall(need_gib([estimate(capture_case(depth), profile)]), profile)
        if why:
            skipped[depth] = why
        else:
            fit.append(depth)
    return fit, skipped


def compile_model(model: nn.Module, how: str, backend: object = "inductor") -> nn.Module:
    """``model`` compiled whole (``torch.compile``) or regionally (each block of ``model.blocks`` in place)."""
    if how == "whole":
        return torch.compile(model, backend=backend)
    if how == "regional":
        for block in model.blocks:
            block.compile(backend=backend)
        return model
    raise ValueError(f"how must be one of {HOWS}, got {how!r}")


def train_step_seconds(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], device: str) -> float:
    """Seconds for one forward and backward (cross-entropy), synchronised."""
    synchronize(device)
    start = time.perf_counter()
    nn.functional.cross_entropy(model(batch[0]), batch[1]).backward()
    synchronize(device)
    return time.perf_counter() - start


@dataclass
class ColdStart:
    """What one fresh process paid for its first compiled training step."""

    how: str
    cache: str  # "empty", "warm" (a folder an earlier run filled) or "mega-cache" (empty folder + artifacts)
    first_step_s: float  # compile + first run
    second_step_s: float
    fx_graph_hits: int  # Inductor's FX graph cache
    fx_graph_misses: int
    aot_hits: int  # AOTAutograd's cache
    artifacts_bytes: int = 0  # size of the mega-cache saved afterwards, if asked
    torch: str = torch.__version__


def _probe(args: argparse.Namespace) -> ColdStart:
    """Inside the child: optionally load artifacts, compile, time two steps, optionally save artifacts."""
    from torch._dynamo.utils import counters

    profile = get_profile()
    apply_threads(profile)
    if args.load:
        torch.compiler.load_cache_artifacts(Path(args.load).read_bytes())
    model = compile_model(make_vit(profile, lesson_shape(profile)), args.how)
    batch = image_batch(profile, 0)
    first = train_step_seconds(model, batch, profile.device)
    second = train_step_seconds(model, batch, profile.device)
    saved = 0
    if args.save:
        artifacts = torch.compiler.save_cache_artifacts()
        if artifacts is not None:
            Path(args.save).write_bytes(artifacts[0])
            saved = len(artifacts[0])
    return ColdStart(
        args.how,
        args.cache_label,
        first,
        second,
        counters["inductor"]["fxgraph_cache_hit"],
        counters["inductor"]["fxgraph_cache_miss"],
        counters["aot_autograd"]["autograd_cache_hit"],
        saved,
    )


def probe(
    how: str, cache_dir: Path, label: str, load: Path | None = None, save: Path | None = None, timeout_s: float = 1800
) -> ColdStart:
    """One first training step in a fresh Python process whose Inductor cache is ``cache_dir``."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir)}
    cmd = [sys.executable, "-m", "coursekit.lessons.compile_time.material", "--how", how, "--cache-label", label]
    cmd += ["--load", str(load)] if load else []
    cmd += ["--save", str(save)] if save else []
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"the probe failed ({' '.join(cmd[2:])}):\n{proc.stderr[-3000:]}")
    return ColdStart(**json.loads(proc.stdout.strip().splitlines()[-1]))


COLD_STARTS = (
    "whole, empty cache",
    "whole, warm cache (same folder)",
    "whole, mega-cache loaded",
    "regional, empty cache",
)


def cold_starts(scratch: Path) -> dict[str, ColdStart]:
    """The lesson's four fresh-process first steps (``COLD_STARTS``), with cache folders made (and removed)
    under ``scratch``: empty (saving mega-cache artifacts), the same folder again, an empty folder with the
    artifacts loaded, and regional compilation in an empty folder."""
    import shutil

    scratch.mkdir(parents=True, exist_ok=True)
    artifacts = scratch / "mega-cache.bin"
    try:
        runs = dict(
            zip(
                COLD_STARTS,
                (
                    probe("whole", scratch / "a", "empty", save=artifacts),
                    probe("whole", scratch / "a", "warm"),
                    probe("whole", scratch / "b", "mega-cache", load=artifacts),
                    probe("regional", scratch / "c", "empty"),
                ),
            )
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return runs


def capture_seconds(profile: Profile, how: str, depth: int, backend: str = "aot_eager", seed: int = 0) -> float:
    """Seconds to capture (and run) the first training step of a ``depth``-block model in this process."""
    torch.compiler.reset()
    model = make_vit(profile, replace(lesson_shape(profile), depth=depth), seed)
    batch = image_batch(profile, seed)
    synchronize(profile.device)
    start = time.perf_counter()
    train_step_seconds(compile_model(model, how, backend), batch, profile.device)
    return time.perf_counter() - start


def capture_scaling(
    profile: Profile, depths: list[int], trials: int = 2, backend: str = "aot_eager"
) -> dict[str, list[float]]:
    """Median capture seconds per depth, whole model and regional (after one untimed warm-up capture)."""
    if not depths:  # every depth was too large for this GPU's free memory
        return {how: [] for how in HOWS}
    capture_seconds(profile, "whole", depths[0], backend)  # imports and first-use costs: not a trial
    return {
        how: [statistics.median(capture_seconds(profile, how, d, backend, t) for t in range(trials)) for d in depths]
        for how in HOWS
    }


@dataclass
class HygieneRun:
    """A compiled optimizer + scheduler loop: graphs compiled after each step, step times, learning rates."""

    lr_kind: str
    graphs: list[int]
    step_s: list[float]
    lrs: list[float]


def lr_hygiene(
    profile: Profile,
    lr_kind: str,
    steps: int,
    backend: object = "inductor",
    scheduler: Callable | None = None,
    depth: int = 1,
    lr: float = 1e-3,
    fail_on_recompile_after: int | None = None,
    foreach: bool | None = None,
) -> HygieneRun:
    """``steps`` steps of AdamW + a warm-up-then-cosine ``LambdaLR`` with the step compiled; ``lr_kind`` is
    ``"float"`` or ``"tensor"``. Counts graphs with a ``CompileCounterWithBackend(backend)``. From step
    ``fail_on_recompile_after + 1`` on, steps run under ``set_stance("fail_on_recompile")``. ``foreach`` picks
    AdamW's implementation (``None``: its default, the foreach kernels on CUDA, a loop over tensors on CPU; with
    ``True``, AdamW refuses a tensor rate unless it is also ``capturable``). The model is the lesson's ViT cut to
    ``depth`` blocks: compiling the optimizer's update costs time per parameter tensor (Inductor,
    caches off, smoke profile, one thread of a 2-core AMD EPYC, torch 2.14.1: 17 s for two blocks, 10 s for one),
    and one block recompiles as twelve do."""
    from torch._dynamo.testing import CompileCounterWithBackend

    from coursekit.lessons.compile_time.givens import make_scheduler

    torch.compiler.reset()
    model = make_vit(profile, replace(lesson_shape(profile), depth=depth))
    rate = torch.tensor(lr) if lr_kind == "tensor" else lr
    optimizer = torch.optim.AdamW(model.parameters(), lr=rate, foreach=foreach)
    sched = (scheduler or make_scheduler)(optimizer)
    counter = CompileCounterWithBackend(backend) if isinstance(backend, str) else backend

    @torch.compile(backend=counter)
    def update() -> None:
        optimizer.step()
        sched.step()

    run = HygieneRun(lr_kind, [], [], [])
    batch = image_batch(profile, 0)
    for i in range(steps):
        nn.functional.cross_entropy(model(batch[0]), batch[1]).backward()
        guarded = fail_on_recompile_after is not None and i >= fail_on_recompile_after
        synchronize(profile.device)
        start = time.perf_counter()
        with torch.compiler.set_stance("fail_on_recompile" if guarded else "default"):
            update()
        synchronize(profile.device)
        run.step_s.append(time.perf_counter() - start)
        optimizer.zero_grad(set_to_none=True)
        run.graphs.append(getattr(counter, "frame_count", 0))
        run.lrs.append(float(optimizer.param_groups[0]["lr"]))
    return run


def timed_hygiene(profile: Profile, steps: int = 6) -> dict[str, HygieneRun]:
    """``lr_hygiene`` with Inductor and its caches off, float then tensor learning rate, after one tiny
    untimed compile (so that neither run pays Inductor's one-time start-up in this process)."""
    import torch._inductor.config as inductor_config

    with inductor_config.patch(force_disable_caches=True):
        torch.compile(lambda x: x * 2 + 1)(torch.ones(4, device=profile.device))
        return {kind: lr_hygiene(profile, kind, steps=steps) for kind in ("float", "tensor")}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--how", choices=HOWS, default="whole")
    parser.add_argument("--cache-label", default="empty")
    parser.add_argument("--load", help="mega-cache artifacts to load before compiling")
    parser.add_argument("--save", help="where to save mega-cache artifacts afterwards")
    args = parser.parse_args(argv)
    print(json.dumps(asdict(_probe(args))))


if __name__ == "__main__":
    main()
