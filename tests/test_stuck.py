"""What the judge reads from a timed-out worker's log (``grader.stuck``): the probe thread's notebook frame, the
line Dynamo traced, one place per loop; and text learner code printed there to look like a stack changes nothing
but its own message, within bounds."""

from __future__ import annotations

from grader import stuck

CELLS = ["import torch\n", "def f(x):\n    n = 0\n    while n >= 0:\n        n += 1\n    return x\n"]
PROBING = '  File "/kit/grader/probing.py", line 40 in run\n'


def dump(*frames: str, traced: str = "") -> str:
    head = 'Thread 0x2 (most recent call first):\n  File "/x/threading.py", line 1 in wait\n\n'
    body = "Current thread 0x1 (most recent call first):\n" + "".join(frames) + PROBING
    return head + body + (f"{stuck.DYNAMO_MARK}{traced}\n" if traced else "")


def test_the_probe_threads_frame_and_its_loop_are_one_place() -> None:
    at_body, at_header = (stuck.parse(dump(f'  File "<code cell 2>", line {n} in f\n')) for n in (4, 3))
    assert at_body.frames[0] == stuck.Frame(2, 4, "f") and not at_body.compiling
    assert stuck.place(at_body, CELLS) == stuck.place(at_header, CELLS) == (2, 3), "a loop's lines take turns"
    said = stuck.describe(at_body, CELLS)
    assert said == " It was in `f`, the 2nd code cell, line 4: `n += 1`, in the loop on line 3: `while n >= 0:`."


def test_a_loop_dynamo_is_tracing_is_the_same_place_and_a_lowering_is_none() -> None:
    dynamo = '  File "/t/torch/_dynamo/symbolic_convert.py", line 9 in step\n'
    traced = stuck.parse(dump(dynamo, traced="<code cell 2>\t4\tf"))
    assert traced.frames == () and traced.compiling and traced.traced == stuck.Frame(2, 4, "f")
    assert stuck.place(traced, CELLS) == (2, 3) and "torch.compile was tracing `f`" in stuck.describe(traced, CELLS)
    lowering = stuck.parse(
        dump('  File "/t/torch/_inductor/graph.py", line 9 in codegen\n', dynamo, traced="<code cell 2>\t6\tf")
    )
    assert lowering.lowering and stuck.place(lowering, CELLS) is None, "a graph's compile may sit on one line a while"


def test_look_alikes_printed_by_learner_code_are_bounded() -> None:
    forged = dump(
        '  File "<code cell 99999999999999999999999999>", line 1 in f\n',
        '  File "<code cell 2>", line 4 in ' + "x" * 100_000 + "\n",
        traced="<code cell 2>\t" + "9" * 5000 + "\tf",
    )
    got = stuck.parse(forged)
    assert got.frames == (stuck.Frame(2, 4, "x" * 80),) and got.traced is None, got
    assert len(stuck.describe(got, CELLS)) < 300
    assert (
        stuck.parse("no stack here") is None and stuck.describe(None, CELLS) == "" and stuck.place(None, CELLS) is None
    )
