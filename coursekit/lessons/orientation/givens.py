"""Exercise 0's given code: readers for what each layer of ``torch.compile`` produces.

``graph_calls`` lists the operations in an FX graph (what Dynamo captured), and
``kernel_names`` lists the kernels in the code Inductor generated. The
exercise notebook uses them to show your results, and the grader reads your
results with these same functions.
"""

from __future__ import annotations

import re

import torch

# Inductor's output code defines each kernel as `<name> = async_compile.<kind>(...)`: `cpp_pybinding` for
# C++ on a CPU, `triton` for Triton on a GPU.
_KERNEL = re.compile(r"^(\w+) = async_compile\.\w+\(", re.MULTILINE)


def graph_calls(gm: torch.fx.GraphModule) -> list[str]:
    """The operations of ``gm`` in order: ``sin`` for a function (``torch.sin``), ``mul`` for an operator
    (``*``), ``Tensor.relu`` for a tensor method (``x.relu()``) and a submodule's name for a module call."""
    calls = []
    for node in gm.graph.nodes:
        if node.op == "call_function":
            calls.append(getattr(node.target, "__name__", str(node.target)))
        elif node.op == "call_method":
            calls.append(f"Tensor.{node.target}")
        elif node.op == "call_module":
            calls.append(str(node.target))
    return calls


def kernel_names(code: str) -> list[str]:
    """The kernels defined in Inductor's generated code, e.g. ``['cpp_fused_add_cos_mul_sin_0']`` on a CPU or
    ``['triton_poi_fused_add_cos_mul_sin_0']`` on a GPU. Each name lists the operations fused into it."""
    return _KERNEL.findall(code)
