"""Exercise 4: the notebook and the names the grader reads from it (ships in the learner kit)."""

from coursekit.lessons import lesson
from grader.exercises import Name

NOTEBOOK = lesson("ex04").exercise  # the lesson's manifest (coursekit/lessons/*/lesson.toml) names it
NAMES = (
    Name(
        "bucket_length",
        "def bucket_length(n: int) -> int: the padded length (>= n, <= 2 * MAX_LEN, non-decreasing, at most "
        "MAX_BUCKETS distinct values over 1..MAX_LEN) for a batch whose longest sequence has n tokens.",
    ),
    Name(
        "collate",
        "def collate(seqs: list[Tensor]) -> (tokens [B, bucket_length(longest)] int64 padded with PAD, mask "
        "[B, same] bool, True on real tokens).",
    ),
    Name(
        "MaskedTagger",
        "class MaskedTagger(NaiveTagger): forward(tokens, mask) -> logits [B, classes], equal to NaiveTagger "
        "on each unpadded sequence, with no Python-scalar guard.",
    ),
    Name(
        "compile_tagger",
        "def compile_tagger(model, backend='inductor') -> Callable: the model compiled with "
        "torch.compile(..., backend=backend) for a stream of bucketed batches.",
    ),
)
