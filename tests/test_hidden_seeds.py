"""Hidden inputs come from keyed hashes of the grader's secret (``Context.seed``), never from the secret itself.

Red team, session 37: checks sent the worker ``secret_seed + i`` and ``secret_seed % 1000`` as probes' seeds, and
learner code recovered the 31-bit secret, and with it every check's hidden inputs, from one grading."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from grader.context import MIN_SECRET_CHARS, SEED_ENV, Context

CHECKS = Path(__file__).resolve().parents[1] / "grader" / "exercises"


def test_a_seed_is_fixed_by_the_secret_and_its_purpose_and_says_nothing_of_the_others() -> None:
    ctx, same, other = Context.create(secret="a" * 32), Context.create(secret="a" * 32), Context.create(secret="b")
    seeds = {(purpose, i): ctx.seed(purpose, i) for purpose in ("ex01.x", "ex01.y", "ex04.stream") for i in range(50)}
    assert all(0 <= s < 2**31 for s in seeds.values())
    assert seeds == {(purpose, i): same.seed(purpose, i) for purpose, i in seeds}, "a regrade must see the same inputs"
    assert len(set(seeds.values())) == len(seeds), "two purposes or indices share a seed"
    assert all(ctx.seed(p, i) != other.seed(p, i) for p, i in seeds), "another secret must give other seeds"
    steps = {seeds[p, i + 1] - seeds[p, i] for p, i in seeds if (p, i + 1) in seeds}
    assert len(steps) > 100, "consecutive seeds differ by a fixed step: one gives away the next"


def test_an_unset_secret_is_long_and_a_short_one_is_warned_about(monkeypatch) -> None:
    monkeypatch.delenv(SEED_ENV, raising=False)
    drawn = {Context.create().secret for _ in range(3)}
    assert len(drawn) == 3 and all(len(s) >= 32 for s in drawn), drawn
    monkeypatch.setenv(SEED_ENV, "20261121")
    with pytest.warns(UserWarning, match=f"{SEED_ENV} has 8 characters"):
        assert Context.create().secret == "20261121"
    monkeypatch.setenv(SEED_ENV, "x" * MIN_SECRET_CHARS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Context.create()


def _secret_readers(root: Path) -> list[str]:
    return [
        f"{path.relative_to(root)}:{n}"
        for path in sorted(root.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\.secret\b|secret_seed", line)
    ]


def test_no_check_reads_the_secret_itself(tmp_path: Path) -> None:
    """Every hidden input goes through ``ctx.seed(purpose, index)``; ``ctx.secret`` plus an offset would bring
    back the hole. The scan finds session 37's lines, and one that reads the new secret."""
    (tmp_path / "old.py").write_text("rng = random.Random(ctx.secret_seed + 1)\nseed = hash(ctx.secret) % 1000\n")
    assert _secret_readers(tmp_path) == ["old.py:1", "old.py:2"]
    readers = _secret_readers(CHECKS)
    assert not readers, f"these lines read the grader's secret directly: use ctx.seed(purpose, index): {readers}"
