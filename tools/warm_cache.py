"""Pre-compile the course's graphs into a compile cache that can be shipped to a workshop's machines.

    python -m tools.warm_cache                  # warm .cache/inductor, pack it, measure cold vs warm
    python -m tools.warm_cache --no-measure     # warm and pack only
    python -m tools.warm_cache --load FILE...   # an attendee: put shipped caches (.tar.gz, .bin) in place

Warming compiles, into the repository's cache (``TORCHINDUCTOR_CACHE_DIR``, ``.cache/inductor``): the
lessons' compiled graphs (lesson 1's compiled rungs, lesson 2's compiled training steps, every compiled
step lesson 3's notebook times), each lesson's in a fresh process of its own (global settings such as the
float32 matmul precision are part of Inductor's cache key, so one lesson's must not reach another's
graphs), then every graph the grader's judge compiles, by grading every reference solution. Grading a
reference solution also keeps the kernels its sandboxed worker compiled in ``.cache/grader-seed/``: every
later grading worker starts with a private copy of them (never of the cached graphs, which carry source
lines), so a learner's correct code compiles warm.  It then writes two shippable forms to ``.cache/warm/``:

* ``compile-cache-<device>-torch<version>.tar.gz``: the inductor cache folder itself (FX graphs,
  AOTAutograd entries and the compiled kernels: C++ shared objects on CPU, Triton binaries on GPU);
* ``mega-cache-<device>-torch<version>[-<lesson>].bin``: ``torch.compiler.save_cache_artifacts()``, the
  portable artifacts of each process that compiled (a lesson's, then the grader's), each loaded with
  ``torch.compiler.load_cache_artifacts``.

A cache only hits on the same torch version, device model and (on CPU) instruction set: build it on
the machine type the attendees use (the shared GPU box, or one lab machine).

Measuring runs representative first calls in fresh processes, each from an empty cache folder, a
folder filled from the mega-cache files, and the unpacked inductor folder, and records the seconds in
``bench/results/warm-cache-<device>-<profile>-torch<version>.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coursekit.lessons import Lesson

ROOT = Path(__file__).resolve().parent.parent

CACHE = ROOT / ".cache" / "inductor"
OUT = ROOT / ".cache" / "warm"
RESULTS = ROOT / "bench" / "results"
# Representative first calls, each compiling and running one graph forward and backward: every lesson's
# ``warm.py`` names its own (``ITEMS``, and ``MEASURED`` for those timed cold vs warm), and the grader adds two.
LESSON_TIMEOUT_S = 3600  # one lesson's warm.py, in its own process (the longest took about a minute on 2 CPU cores)
MEASURE_TIMEOUT_S = 1800  # one measuring process: every measured first call in one condition
GRADER_ITEMS = {
    "grader-ex01-solution": "grader, exercise 1: the reference SmoothedCE compiled, forward+backward",
    "grader-ex02-baseline": "grader, exercise 2: the compiled BrokenScorer baseline, forward+backward",
}


def warm_lessons() -> list[Lesson]:
    """The lessons that have a ``warm.py``, in course order."""
    from coursekit.lessons import HERE, lessons

    return [lesson for lesson in lessons() if (HERE / lesson.topic / "warm.py").is_file()]


def lesson_items() -> dict[str, tuple[str, object]]:
    """``{item: (description, fn(profile))}`` from every lesson that has a ``warm.py``."""
    found: dict[str, tuple[str, object]] = {}
    for lesson in warm_lessons():
        found.update(lesson.module("warm").ITEMS)
    return found


def measured_items() -> list[str]:
    """The items timed cold vs warm: each lesson's ``MEASURED``, then the grader's."""
    names: list[str] = []
    for lesson in warm_lessons():
        names += list(lesson.module("warm").MEASURED)
    return names + list(GRADER_ITEMS)


def describe(item: str) -> str:
    return GRADER_ITEMS.get(item) or lesson_items()[item][0]


def _first_call(item: str) -> float:
    """Seconds for ``item``'s first call (compile + run), in this process."""
    import torch

    from coursekit.profile import get_profile

    profile = get_profile()
    start = time.perf_counter()
    if item == "grader-ex01-solution":
        from coursekit.lessons.cross_entropy.givens import sample_inputs
        from grader.interface import NOTEBOOKS
        from grader.loader import load_notebook

        ns = load_notebook(ROOT / "solutions" / NOTEBOOKS["ex01"]).namespace
        logits, target, weights = sample_inputs(profile.loss_batch, profile.loss_classes, 0, device=profile.device)
        start = time.perf_counter()
        ns["compile_loss"](ns["SmoothedCE"](weights).to(profile.device))(logits, target).backward()
    elif item == "grader-ex02-baseline":
        from coursekit.lessons.graph_breaks.givens import BrokenScorer, sample_rows

        torch.manual_seed(0)
        model = torch.compile(BrokenScorer().to(profile.device))
        model(sample_rows(profile.batch_size, 32, 0, device=profile.device)).square().sum().backward()
    elif item in (items := lesson_items()):
        items[item][1](profile)
    else:
        raise SystemExit(f"unknown item {item}")
    if profile.device_class == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def first_calls_main(items: list[str], load: list[str]) -> None:
    """Child process: load the mega-cache files ``load`` (if any), then time each item's first call; print JSON."""
    import torch

    from coursekit.cache import key_settings
    from coursekit.profile import apply_threads, get_profile

    apply_threads(get_profile())
    start = time.perf_counter()
    for path in load:
        torch.compiler.load_cache_artifacts(Path(path).read_bytes())
    seconds: dict[str, float] = {"load_s": time.perf_counter() - start}
    settings = key_settings()
    for before, item in zip([None, *items], items):
        if key_settings() != settings:  # this item would compile under other cache keys than in a notebook
            raise SystemExit(
                f"{before} changed a global setting in Inductor's cache key ({settings} became {key_settings()}); "
                "the first calls measured together must leave them alone: measure it alone with --items"
            )
        seconds[item] = _first_call(item)
    print(json.dumps(seconds))


def _run_child(cmd: list[str], env: dict[str, str], timeout_s: float, what: str, stderr: int | None = None) -> dict:
    """Run one of this tool's child processes; its last line of output, JSON. A failure or a timeout stops the tool
    with a message that names ``what`` the child was doing."""
    try:
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise SystemExit(
            f"{what} stopped after {timeout_s / 60:.0f} min (too much to compile for this machine, or a hang): "
            "run its items alone to see which"
        ) from None
    if proc.returncode:
        errors = "" if stderr is None else proc.stderr[-4000:]
        where = "the end of its output and errors" if errors else "the end of its output (its errors are above)"
        raise SystemExit(f"{what} failed (exit {proc.returncode}); {where}:\n{proc.stdout[-2000:]}{errors}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def warm_lesson_main(topic: str, save: Path) -> None:
    """Child process: compile one lesson's ``warm.py`` items into the cache, then write the mega-cache artifacts
    they recorded to ``save`` (nothing where there were none); print ``{description: seconds}`` as JSON."""
    import torch

    from coursekit.lessons import lesson
    from coursekit.profile import apply_threads, get_profile

    profile = get_profile()
    apply_threads(profile)
    seconds = {}
    for what, fn in lesson(topic).module("warm").ITEMS.values():
        start = time.perf_counter()
        fn(profile)
        seconds[what] = round(time.perf_counter() - start, 1)
    artifacts = torch.compiler.save_cache_artifacts()
    if artifacts:
        save.write_bytes(artifacts[0])
    print(json.dumps(seconds))


def warm_lesson(topic: str, save: Path, cache: Path) -> dict[str, float]:
    """Run ``topic``'s ``warm.py`` items in a fresh process (:func:`warm_lesson_main`) that compiles into ``cache``.

    A fresh process per lesson, because global settings are part of Inductor's cache key (``coursekit.cache.
    key_settings``): a ``warm.py`` that sets one as its notebook does, the float32 matmul precision say, would carry
    it into the keys of every graph compiled after it in the same process, which then miss in the notebooks that
    compile them. Returns the items' seconds."""
    cmd = [sys.executable, __file__, "--warm-lesson", topic, "--save-bin", str(save)]
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    return _run_child(cmd, env, LESSON_TIMEOUT_S, f"warming {topic}")


def warm(cache: Path) -> tuple[list[Path], list[str]]:
    """Compile the lessons' and the grader's graphs into the repository's cache; return the mega-cache files
    written (one per process that compiled: each lesson's, then this one's)."""
    import torch

    from coursekit.profile import apply_threads, get_profile
    from grader.interface import NOTEBOOKS
    from grader.registry import checks_for

    profile = get_profile()
    apply_threads(profile)
    OUT.mkdir(parents=True, exist_ok=True)
    # an earlier run's files, which this one replaces: none of them is left beside a part of this run's
    for old in [*OUT.glob(f"{_stem('mega-cache')}*.bin"), OUT / f"{_stem('compile-cache')}.tar.gz"]:
        old.unlink(missing_ok=True)
    done, megas = [], []
    for warm_one in warm_lessons():
        save = OUT / f"{_stem('mega-cache')}-{warm_one.topic}.bin"
        for what, seconds in warm_lesson(warm_one.topic, save, cache).items():
            print(f"  {what}: {seconds:.1f} s", flush=True)
            done.append(what)
        megas += [save] if save.is_file() else []
    # the grader's items in this process, so into the shipped cache: the graphs a learner's correct code compiles to
    # in a notebook's checks (grading's workers compile in private scratch and keep only kernels, in the seed)
    for item, what in GRADER_ITEMS.items():
        print(f"  {what}: {_first_call(item):.1f} s", flush=True)
        done.append(what)
    from grader.runner import grade_notebook

    for exercise, name in NOTEBOOKS.items():
        solution = ROOT / "solutions" / name
        if not solution.is_file() or not checks_for(exercise):
            continue
        start = time.perf_counter()
        grade = grade_notebook(solution, exercise, profile, 12345, progress=False)  # also seeds learner workers
        failed = [r.id for r in grade.results if not r.passed]
        print(
            f"  grader, {exercise}: {len(grade.results)} checks on the reference solution in "
            f"{time.perf_counter() - start:.1f} s" + (f" (failed: {failed})" if failed else ""),
            flush=True,
        )
        done.append(
            f"grader: every check of {exercise} on its reference solution (the judge's graphs here, the "
            "worker's kernels in .cache/grader-seed)"
        )
    artifacts = torch.compiler.save_cache_artifacts()
    if artifacts:
        megas.append(OUT / f"{_stem('mega-cache')}.bin")
        megas[-1].write_bytes(artifacts[0])
    return megas, done


def _stem(kind: str) -> str:
    import torch

    from coursekit.profile import get_profile
    from grader.context import device_model, slug

    profile = get_profile()
    return f"{kind}-{slug(device_model(profile))}-torch{slug(torch.__version__)}"


def pack(cache: Path, out: Path) -> Path:
    """The inductor cache folder as a tarball that unpacks into another ``TORCHINDUCTOR_CACHE_DIR``."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{_stem('compile-cache')}.tar.gz"
    with tarfile.open(target, "w:gz") as tar:
        for path in sorted(cache.iterdir()):
            tar.add(path, arcname=path.name)
    return target


def load(path: Path, cache: Path) -> None:
    """Put a shipped cache in place: unpack a tarball, or load a mega-cache (which writes to ``cache``)."""
    cache.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".tar.gz"):
        with tarfile.open(path) as tar:
            tar.extractall(cache, filter="data")
    else:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys, torch; torch.compiler.load_cache_artifacts(open(sys.argv[1], 'rb').read())",
                str(path),
            ],
            env=env,
            check=True,
        )
    print(f"loaded {path} into {cache}")


def _child(items: list[str], cache: Path, load_bins: list[Path]) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    cmd = [sys.executable, __file__, "--first-calls", ",".join(items)] + [
        arg for path in load_bins for arg in ("--load-bin", str(path))
    ]
    start = time.perf_counter()
    seconds = _run_child(cmd, env, MEASURE_TIMEOUT_S, "measuring first calls", stderr=subprocess.PIPE)
    return {**seconds, "process_s": time.perf_counter() - start}


def measure(items: list[str], tarball: Path, megas: list[Path], repeats: int) -> dict:
    """First-call seconds per item from an empty cache, the mega-cache files, and the shipped inductor folder."""
    runs: dict[str, list[dict]] = {"cold": [], "mega-cache": [], "inductor-folder": []}
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="warm-") as tmp:
            cold, mega_dir, folder = Path(tmp) / "cold", Path(tmp) / "mega", Path(tmp) / "folder"
            runs["cold"].append(_child(items, cold, []))
            if megas:
                runs["mega-cache"].append(_child(items, mega_dir, megas))
            load(tarball, folder)
            runs["inductor-folder"].append(_child(items, folder, []))
    summary = {}
    for condition, results in runs.items():
        if results:
            summary[condition] = {item: round(statistics.median(r[item] for r in results), 2) for item in items}
            summary[condition]["total"] = round(sum(summary[condition][i] for i in items), 2)
            summary[condition]["mega_cache_load_s"] = round(statistics.median(r["load_s"] for r in results), 2)
    return summary


def write_results(
    summary: dict, items: list[str], sizes: dict, warmed: list[str], repeats: int, took: dict[str, float]
) -> list[Path]:
    """The results, with how long ``make warm-cache`` took here (``took``: seconds warming and packing, measuring)."""
    import torch

    from coursekit.profile import get_profile
    from grader.context import device_model, slug

    profile = get_profile()
    doc = {
        "device": profile.device_class,
        "device_name": device_model(profile),
        "profile": profile.name,
        "torch": torch.__version__,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": {"cpu_count": os.cpu_count()},
        "repeats": repeats,
        "items": {i: describe(i) for i in items},
        "first_call_s": summary,
        "artifact_bytes": sizes,
        "warmed": warmed,
        "took_s": {k: round(v, 1) for k, v in took.items()},
        "method": "each condition is a fresh process (torch imported before timing); seconds from "
        "torch.compile to the end of the first forward+backward; medians over `repeats`",
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / f"warm-cache-{slug(device_model(profile))}-{profile.name}-torch{slug(torch.__version__)}"
    Path(f"{stem}.json").write_text(json.dumps(doc, indent=2) + "\n")
    conditions = list(summary)
    md = [
        f"# Compile cache: cold vs warm first calls ({device_model(profile)}, {profile.name}, "
        f"torch {torch.__version__})",
        "",
        "Seconds from `torch.compile` to the end of the first forward+backward, median of "
        f"{repeats}. Each condition is one fresh process (torch already imported) that runs the first calls in "
        "this order, so the first row also pays `torch.compile`'s one-time start-up. `cold`: an empty "
        "`TORCHINDUCTOR_CACHE_DIR`; `mega-cache`: an empty one after `torch.compiler.load_cache_artifacts` of "
        "each shipped `.bin`; `inductor-folder`: the shipped `.tar.gz` of `.cache/inductor` unpacked into it.",
        "",
        "| first call | " + " | ".join(conditions) + " |",
        "|---|" + "---|" * len(conditions),
    ]
    for item in [*items, "total"]:
        md.append(
            f"| {describe(item) if item != 'total' else '**total**'} | "
            + " | ".join(f"{summary[c][item]:.1f}" for c in conditions)
            + " |"
        )
    md += ["", "Shipped files: " + ", ".join(f"`{k}` {v / 1024**2:.1f} MiB" for k, v in sizes.items())]
    md += [
        "",
        f"`make warm-cache` took {sum(took.values()) / 60:.1f} min here ({os.cpu_count()} cores): "
        f"{took['warm'] / 60:.1f} min warming (the lessons' graphs, then grading every reference solution) and "
        f"packing, {took['measure'] / 60:.1f} min measuring.",
    ]
    Path(f"{stem}.md").write_text("\n".join(md) + "\n")
    return [Path(f"{stem}.json"), Path(f"{stem}.md")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--load", type=Path, nargs="+", help="put shipped caches (a .tar.gz, mega-cache .bin files) in place"
    )
    parser.add_argument("--no-measure", action="store_true", help="warm and pack only")
    parser.add_argument(
        "--items",
        default=None,
        help="first calls to measure (comma-separated; default: each lesson's MEASURED and the grader's)",
    )
    parser.add_argument("--repeats", type=int, default=1, help="measurements per condition (default 1)")
    parser.add_argument("--first-calls", help=argparse.SUPPRESS)
    parser.add_argument("--load-bin", action="append", default=[], help=argparse.SUPPRESS)
    parser.add_argument("--warm-lesson", help=argparse.SUPPRESS)
    parser.add_argument("--save-bin", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cache = Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or CACHE)
    if args.first_calls:
        first_calls_main(args.first_calls.split(","), args.load_bin)
        return 0
    if args.warm_lesson:
        if args.save_bin is None:
            parser.error("--warm-lesson needs --save-bin")
        warm_lesson_main(args.warm_lesson, args.save_bin)
        return 0
    if args.load:
        for path in args.load:
            load(path, cache)
        return 0
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    print(f"warming {cache} ...", flush=True)
    start = time.perf_counter()
    megas, warmed = warm(cache)
    tarball = pack(cache, OUT)
    sizes = {p.name: p.stat().st_size for p in (tarball, *megas)}
    print(f"warmed in {time.perf_counter() - start:.0f} s; ship {', '.join(str(p) for p in (tarball, *megas))}")
    if args.no_measure:
        return 0
    items = args.items.split(",") if args.items else measured_items()
    warm_s, start = time.perf_counter() - start, time.perf_counter()
    summary = measure(items, tarball, megas, args.repeats)
    took = {"warm": warm_s, "measure": time.perf_counter() - start}
    for condition, values in summary.items():
        print(
            f"  {condition:16s} "
            + "  ".join(f"{i} {values[i]:.1f} s" for i in items)
            + f"  total {values['total']:.1f} s"
        )
    for path in write_results(summary, items, sizes, warmed, args.repeats, took):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
