"""Exercise 0's wrong submissions: edits of the solution notebook's source text, each with exactly the
checks it must fail (every other check must pass). The project's tests grade each one; instructor only, never in
the learner kit."""

from __future__ import annotations

WRONG: dict[str, tuple[dict[str, str], set[str]]] = {
    "dynamic setting ignored": (
        {"torch.compile(fn, backend=counter, dynamic=dynamic)": "torch.compile(fn, backend=counter)"},
        {"ex00.recompiles.count", "ex00.recompiles.unseen"},
    ),
    "no reset before counting": (
        {"    torch.compiler.reset()\n    counter = CompileCounter()": "    counter = CompileCounter()"},
        # each first count is right; the public check's second count starts with the first one's 4 graphs left
        # over and reaches the recompile limit (8), and the hidden check asks its first count again
        {"ex00.recompiles.count", "ex00.recompiles.unseen"},
    ),
    "no reset before capturing": (
        {"    torch.compiler.reset()\n    graphs = []": "    graphs = []"},
        # a second capture of the same function at another size is dynamic: the graph takes the size as an input
        {"ex00.capture.branches"},
    ),
    "fx.symbolic_trace instead of Dynamo": (
        {
            "    torch.compile(fn, backend=backend, fullgraph=True)(*args)\n    return graphs[-1]": (
                "    return torch.fx.symbolic_trace(fn)"
            )
        },
        {"ex00.capture.branches"},
    ),
    "uncompiled function handed to run_and_get_code": (
        {"run_and_get_code(compiled, *args)": "run_and_get_code(fn, *args)"},
        {"ex00.inductor.code"},
    ),
    "code made up with the kernel's name and the inputs' shape, nothing compiled": (
        {
            '    _, codes = run_and_get_code(compiled, *args)\n    return "\\n".join(codes)': (
                "    shape = tuple(args[0].shape)\n"
                '    return f"def call(args):\\ncpp_fused_add_cos_mul_sin_0 = async_compile.cpp_pybinding(\\n"'
                ' f"# {shape}\\n"'
            )
        },
        # a constant with the name and "(5, 3)" took the check while its inputs were fixed (red team, session 40)
        {"ex00.inductor.code"},
    ),
}
