"""Worker-side probes: call the learner's names on the judge's inputs and report what they return."""

from __future__ import annotations

from grader.probing import Call, Reply, learner_call, plain, probe


@probe("ex99.double")
def double(call: Call) -> Reply:
    """``double`` on the judge's input ``x``."""
    out = learner_call(call.get("double"), (call.input("x"),), "double(x)")
    return Reply(tensors={"out": plain(out, "double(x)")})
