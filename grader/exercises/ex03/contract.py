"""Exercise 3: the notebook and the names the grader reads from it (ships in the learner kit)."""

from coursekit.lessons import lesson
from grader.exercises import Name

NOTEBOOK = lesson("ex03").exercise  # the lesson's manifest (coursekit/lessons/*/lesson.toml) names it
NAMES = (
    Name(
        "DistillLoss",
        "class DistillLoss(nn.Module): __init__(temperature: float = TEMPERATURE, alpha: float = ALPHA); "
        "forward(student_logits [N, C], teacher_logits [N, C], labels [N] int64) -> scalar tensor: alpha * "
        "T**2 * KL(softmax(t/T) || softmax(s/T)) (batchmean) + (1 - alpha) * CE(s, labels).",
    ),
    Name(
        "Distiller",
        "class Distiller(nn.Module): __init__(student, teacher, loss) freezes the teacher; forward(images, "
        "labels) -> the loss of the student's logits against the teacher's (under no_grad).",
    ),
    Name(
        "make_train_step",
        "def make_train_step(distiller, optimizer, backend='inductor') -> step(images, labels) -> detached "
        "loss: the Distiller compiled as one graph with torch.compile(..., backend=backend), then backward "
        "and optimizer.step().",
    ),
    Name(
        "extract_student",
        "def extract_student(model) -> nn.Module: the plain student module itself (never an OptimizedModule) "
        "inside a Distiller or a torch.compile'd Distiller, whose student may itself be torch.compile'd, for "
        "inference and saving.",
    ),
)
