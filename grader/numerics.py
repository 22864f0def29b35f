"""The float precision learner code is graded in: torch's defaults, as the judge's references and baselines run.

torch trades float32 accuracy for speed through process-wide switches: TF32 tensor cores for float32 matmuls and
convolutions on NVIDIA GPUs (``torch.set_float32_matmul_precision("high")``, ``torch.backends.cuda.matmul.allow_tf32``,
``torch.backends.fp32_precision = "tf32"``; Inductor itself suggests the first on a GPU), bfloat16 matmuls through
oneDNN on a CPU (``"medium"``), or autocast left switched on. The value checks' float32 tolerances need not see such a
switch: exercise 3's reference with ``torch.set_float32_matmul_precision("medium")`` in ``make_train_step`` passed
all its value checks on the CPU (session 39). A speed check, though, would credit the switch to the compiled code,
while the judge's baseline runs at torch's defaults.

So the grading worker records these settings before it loads a notebook (:func:`settings`), puts them back before
every probe (:func:`restore`), and fails a probe after which they differ (:func:`changes`), saying which switch
moved. In-notebook checks fail the same way when a probe's calls changed them. Code that switches precision on and
back off inside one call is not seen: like every observation made in the learner's process, this one can be evaded
(grader/README.md, "What a determined learner could still forge"), and the static scan (``grader.scan``) points an
instructor at such calls.
"""

from __future__ import annotations

from typing import Any

import torch

# torch's float32 precision table (torch >= 2.9): ``backend.op`` -> "ieee", "tf32", "bf16" or "none" (inherit from
# ``backend.all``, then ``generic.all``); parents first, since setting a parent sets its children
PARENTS = (("generic", "all"), ("cuda", "all"), ("mkldnn", "all"))
LEAVES = {
    ("cuda", "matmul"): "float32 matmuls on CUDA (cuBLAS)",
    ("cuda", "conv"): "float32 convolutions on CUDA (cuDNN)",
    ("cuda", "rnn"): "float32 RNNs on CUDA (cuDNN)",
    ("mkldnn", "matmul"): "float32 matmuls on the CPU (oneDNN)",
    ("mkldnn", "conv"): "float32 convolutions on the CPU (oneDNN)",
    ("mkldnn", "rnn"): "float32 RNNs on the CPU (oneDNN)",
}
# the older switches, which torch keeps beside the table (restored first: setting them writes into it)
LEGACY = {
    "float32_matmul_precision": "torch.set_float32_matmul_precision",
    "cublas_allow_tf32": "torch.backends.cuda.matmul.allow_tf32",
    "cudnn_allow_tf32": "torch.backends.cudnn.allow_tf32",
}
REDUCTIONS = {
    f"{lib}_allow_{dtype}_reduced_precision_reduction": f"{where}.allow_{dtype}_reduced_precision_reduction"
    for lib, dtype, where in (
        ("cublas", "fp16", "torch.backends.cuda.matmul"),
        ("cublas", "bf16", "torch.backends.cuda.matmul"),
        ("cpu", "fp16", "torch.backends.cpu"),
    )
}
AUTOCAST_DEVICES = ("cpu", "cuda")
MIXED = "mixed"  # a legacy getter that raises: torch saw the legacy and the new switches disagree


def _read(name: str) -> Any:
    try:
        return getattr(torch._C, f"_get_{name}")()
    except RuntimeError:
        return MIXED


def settings() -> dict[str, Any]:
    """Every precision switch this torch has, read without changing any (names that this torch lacks are left out)."""
    out: dict[str, Any] = {}
    table = getattr(torch._C, "_get_fp32_precision_getter", None)
    for backend, op in (*PARENTS, *LEAVES) if table else ():
        try:
            out[f"{backend}.{op}"] = table(backend, op)
        except (RuntimeError, TypeError, ValueError):
            continue
    for name in (*LEGACY, *REDUCTIONS):
        if hasattr(torch._C, f"_get_{name}"):
            out[name] = _read(name)
    for device in AUTOCAST_DEVICES:
        out[f"autocast.{device}"] = (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
    return out


def restore(pinned: dict[str, Any]) -> None:
    """Set every switch back to ``pinned`` (from :func:`settings`): the older switches, then the table's parents,
    then its leaves, then the reductions and autocast."""
    C = torch._C
    for name in LEGACY:
        value = pinned.get(name, MIXED)
        if value != MIXED:
            getattr(C, f"_set_{name}")(value)
    for backend, op in (*PARENTS, *LEAVES):
        if f"{backend}.{op}" in pinned:
            C._set_fp32_precision_setter(backend, op, pinned[f"{backend}.{op}"])
    for name in REDUCTIONS:
        if name in pinned:
            value = pinned[name]
            getattr(C, f"_set_{name}")(*(value if isinstance(value, tuple) else (value,)))
    for device in AUTOCAST_DEVICES:
        enabled, dtype = pinned[f"autocast.{device}"]
        torch.set_autocast_enabled(device, enabled)
        torch.set_autocast_dtype(device, dtype)


def _effective(values: dict[str, Any], backend: str, op: str) -> str | None:
    """What a leaf of the table means: its own value, else its backend's, else the generic one ("none" inherits)."""
    for key in (f"{backend}.{op}", f"{backend}.all", "generic.all"):
        value = values.get(key)
        if value is None:
            return None
        if value != "none":
            return value
    return "ieee"


def changes(pinned: dict[str, Any]) -> list[str]:
    """What differs now from ``pinned``, in words (empty when nothing does). The table is compared by meaning, so
    setting a switch to the value it already had (``torch.set_float32_matmul_precision("highest")``) is no change."""
    now = settings()
    found = []
    for (backend, op), what in LEAVES.items():
        before, after = _effective(pinned, backend, op), _effective(now, backend, op)
        if before != after:
            found.append(f"{what}: {after} (torch's default: {before})")
    legacy = {} if found else LEGACY  # the older switches say again what the table said, unless it said nothing
    for name, what in {**legacy, **REDUCTIONS}.items():
        if pinned.get(name) != now.get(name):
            found.append(f"{what}: {now.get(name)} (torch's default: {pinned.get(name)})")
    for device in AUTOCAST_DEVICES:
        key = f"autocast.{device}"
        if pinned[key] != now[key]:
            enabled, dtype = now[key]
            found.append(f"autocast on {device}: {'on, ' + str(dtype) if enabled else 'off'} after your code returned")
    return found


def message(found: list[str]) -> str:
    """The teaching message for a probe after which the precision switches had moved."""
    return (
        "your code changed torch's float32 precision settings, which the grader keeps at torch's defaults for every "
        "check (its reference and baseline run there): "
        + "; ".join(found)
        + ". Remove the switch (torch.set_float32_matmul_precision, allow_tf32, fp32_precision, an autocast left "
        "open) from the functions the grader calls; a demo cell may keep it."
    )


def at_load(found: list[str]) -> str:
    """The load note for definitions whose loading moved the switches (set back before every check)."""
    return (
        "loading your definitions changed torch's float32 precision settings ("
        + "; ".join(found)
        + "); the grader set them back to torch's defaults before every check, where its reference and baseline run"
    )
