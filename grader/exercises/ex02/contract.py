"""Exercise 2: the notebook and the names the grader reads from it (ships in the learner kit)."""

from coursekit.lessons import lesson
from grader.exercises import Name

NOTEBOOK = lesson("ex02").exercise  # the lesson's manifest (coursekit/lessons/*/lesson.toml) names it
NAMES = (
    Name(
        "calibrate",
        "@torch.library.custom_op('ex02::calibrate', mutates_args=()) def calibrate(top: Tensor [N]) -> "
        "Tensor [N]: np.interp(top, CALIBRATION_X, CALIBRATION_Y) on top's device and dtype, with a "
        "register_fake implementation.",
    ),
    Name(
        "FixedScorer",
        "class FixedScorer(BrokenScorer): same constructor and parameters; forward(x) -> same result as "
        "BrokenScorer without graph breaks; keeps a `mean_activation` buffer.",
    ),
)
