"""Exercise 6: the notebook and the names the grader reads from it (ships in the learner kit)."""

from coursekit.lessons import lesson
from grader.exercises import Name

NOTEBOOK = lesson("ex06").exercise  # the lesson's manifest (coursekit/lessons/*/lesson.toml) names it
NAMES = (
    Name(
        "compile_blocks",
        "def compile_blocks(model: nn.Module, block_types: tuple[type, ...], backend='inductor') -> nn.Module: "
        "regional compilation: every submodule of model that is an instance of one of block_types, wherever it "
        "sits, compiled in place with module.compile(backend=backend) (the blocks of one kind share one compiled "
        "graph; the state_dict keys do not change; the rest of the model stays eager); returns the model.",
    ),
    Name(
        "make_optimizer",
        "def make_optimizer(model, lr: float = LR) -> torch.optim.AdamW: AdamW with weight_decay=WEIGHT_DECAY "
        "and two parameter groups, in this order: every parameter but model.head's at rate lr, and "
        "model.head's at HEAD_LR_SCALE * lr; each group's rate held in a tensor (torch.tensor(...)).",
    ),
    Name(
        "make_train_step",
        "def make_train_step(model, optimizer, scheduler, backend='inductor') -> step(images, labels) -> "
        "detached loss: cross-entropy of model(images), backward, then optimizer.step() and scheduler.step() "
        "inside one function compiled with torch.compile(..., backend=backend), then the gradients cleared; "
        "no recompile when the scheduler changes the learning rate.",
    ),
)

# Interface names that other given code defines (the release scan reports them instead of refusing).
SHOWN_IN_LESSONS = {
    "make_optimizer": (
        "coursekit/lessons/distillation/givens.py: exercise 3's given optimiser (a float learning rate), "
        "not this answer"
    ),
}
