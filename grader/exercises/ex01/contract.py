"""Exercise 1: the notebook and the names the grader reads from it (ships in the learner kit)."""

from coursekit.lessons import lesson
from grader.exercises import Name

NOTEBOOK = lesson("ex01").exercise  # the lesson's manifest (coursekit/lessons/*/lesson.toml) names it
NAMES = (
    Name(
        "op_counts",
        "def op_counts(fn, args: tuple) -> dict[str, int]: fn(*args) once to warm up, then one more call under "
        "torch.profiler.profile; for every event whose name starts with 'aten::', how many times it ran in that "
        "one call (its count in key_averages(), calls nested in other ops included).",
    ),
    Name(
        "SmoothedCE",
        "class SmoothedCE(nn.Module): __init__(class_weights: Sequence[float], smoothing: float = 0.1, "
        "ignore_index: int = -100); forward(logits [N, C], target [N] int64) -> scalar tensor. Hand-written; "
        "the grader calls .to(device) on it.",
    ),
    Name(
        "builtin_smoothed_ce",
        "def builtin_smoothed_ce(class_weights, smoothing=0.1, ignore_index=-100) -> nn.Module: the same loss"
        " from PyTorch's built-in module.",
    ),
    Name(
        "compile_loss",
        "def compile_loss(loss: nn.Module, backend='inductor') -> Callable: the loss compiled as one graph "
        "with torch.compile(..., backend=backend).",
    ),
    Name(
        "train_step",
        "def train_step(model, loss_fn, optimizer, images, labels, micro_batches=2, max_norm=1.0) -> Tensor: "
        "gradients accumulated over micro_batches equal parts of the batch (each loss divided by micro_batches), "
        "their total norm clipped to max_norm, one optimizer step; returns the batch's mean loss as a detached "
        "tensor, and never waits for the device.",
    ),
)

# Interface names that lesson code defines on purpose (the release scan reports them instead of refusing).
SHOWN_IN_LESSONS = {
    "train_step": "coursekit/training.py: lesson 1 measures this plain step; exercise 1's task 4 asks for a step "
    "that accumulates micro-batches and clips gradients under the same name (tests/test_paste.py grades the "
    "plain one pasted in, and it fails)",
}
