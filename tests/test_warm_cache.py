"""``make warm-cache`` (``tools.warm_cache``) compiles each lesson's graphs in a process of its own.

Global settings are part of Inductor's cache key (``coursekit.cache.key_settings``): a ``warm.py`` that sets the
float32 matmul precision, as its notebook does, would carry it into the keys of the graphs compiled after it in the
same process (the grader's, a later lesson's), which would then miss where they are meant to hit (session 46).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tools import warm_cache

ROOT = Path(__file__).resolve().parents[1]


def test_each_lesson_warms_in_a_process_of_its_own(tmp_path, monkeypatch) -> None:
    import grader.interface

    started: list[list[str]] = []
    cache = tmp_path / "inductor"

    def run(cmd, **kwargs):  # stands in for the child: records its command line, answers as one would
        assert kwargs["env"]["TORCHINDUCTOR_CACHE_DIR"] == str(cache), "the child compiles into the shipped folder"
        started.append(cmd)
        save = Path(cmd[cmd.index("--save-bin") + 1])
        save.write_bytes(b"artifacts")
        topic = cmd[cmd.index("--warm-lesson") + 1]
        return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps({f"{topic} item": 1.0}) + "\n")

    monkeypatch.setattr(warm_cache, "OUT", tmp_path / "warm")
    (tmp_path / "warm").mkdir()
    monkeypatch.setattr(warm_cache, "GRADER_ITEMS", {})
    monkeypatch.setattr(grader.interface, "NOTEBOOKS", {})
    monkeypatch.setattr(warm_cache.subprocess, "run", run)
    # this process compiled nothing here, but an earlier test in it may have (make test's workers run many)
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: None)
    stale = [
        tmp_path / "warm" / f"{warm_cache._stem('mega-cache')}-a-lesson-since-removed.bin",
        tmp_path / "warm" / f"{warm_cache._stem('compile-cache')}.tar.gz",
    ]
    for path in stale:
        path.write_bytes(b"an earlier run's")
    megas, done = warm_cache.warm(cache)
    topics = [lesson.topic for lesson in warm_cache.warm_lessons()]
    assert sorted(topics) == sorted(p.parent.name for p in (ROOT / "coursekit" / "lessons").glob("*/warm.py"))
    assert [cmd[cmd.index("--warm-lesson") + 1] for cmd in started] == topics
    assert all(cmd[:2] == [sys.executable, warm_cache.__file__] for cmd in started), "a fresh Python per lesson"
    assert done == [f"{topic} item" for topic in topics]
    assert [m.name for m in megas] == [f"{warm_cache._stem('mega-cache')}-{topic}.bin" for topic in topics]
    assert not any(p.exists() for p in stale), "an earlier run's files would be shipped beside this run's"


def test_a_lesson_that_hangs_or_fails_stops_warming_with_a_message_that_names_it(monkeypatch) -> None:
    def hangs(cmd, **kwargs):
        raise subprocess.TimeoutExpired(cmd, kwargs["timeout"])

    monkeypatch.setattr(warm_cache.subprocess, "run", hangs)
    with pytest.raises(SystemExit, match="warming some_lesson stopped after 60 min"):
        warm_cache.warm_lesson("some_lesson", Path("unused.bin"), Path("cache"))
    monkeypatch.setattr(
        warm_cache.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, stdout="compiling...\n")
    )
    with pytest.raises(SystemExit, match=r"warming some_lesson failed \(exit 1\)(.|\n)*compiling\.\.\."):
        warm_cache.warm_lesson("some_lesson", Path("unused.bin"), Path("cache"))


def test_first_calls_measured_together_must_leave_the_cache_key_settings_alone(monkeypatch, capsys) -> None:
    def sets_the_precision(item: str) -> float:
        if item == "second":
            torch.backends.cuda.matmul.fp32_precision = "ieee"
        return 1.0

    monkeypatch.setattr(warm_cache, "_first_call", sets_the_precision)
    matmul, before = torch.backends.cuda.matmul, torch.backends.cuda.matmul.fp32_precision
    matmul.fp32_precision = "none"
    try:
        warm_cache.first_calls_main(["first"], [])
        assert json.loads(capsys.readouterr().out) == {"load_s": pytest.approx(0, abs=1), "first": 1.0}
        with pytest.raises(SystemExit, match="second changed a global setting in Inductor's cache key"):
            warm_cache.first_calls_main(["first", "second", "third"], [])
        matmul.fp32_precision = "none"
        warm_cache.first_calls_main(["first", "second"], [])  # alone, or last: no first call is measured after it
        assert json.loads(capsys.readouterr().out)["second"] == 1.0
    finally:
        matmul.fp32_precision = before


@pytest.mark.slow
def test_a_lesson_child_compiles_its_items_and_saves_their_artifacts(tmp_path) -> None:
    save = tmp_path / "lesson.bin"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    first = warm_cache.warm_lessons()[0]  # the first lesson with a warm.py
    cmd = [sys.executable, warm_cache.__file__, "--warm-lesson", first.topic, "--save-bin", str(save)]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seconds = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(seconds) == {what for what, _ in first.module("warm").ITEMS.values()}
    assert save.stat().st_size > 0 and any((tmp_path / "inductor").iterdir())
