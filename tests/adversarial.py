"""Known-bad submissions, each a set of edits to the exercise-1 solution, and how the grader must respond.

Each entry: edits, the checks to run, and for each check either ``"pass"`` or a
substring its failure message must contain.  ``tests/test_integrity.py`` runs them all.
"""

from __future__ import annotations

RETURN = "        return ((1 - eps) * nll + eps / num_classes * smooth) / target_weight.sum()"
INIT = '        self.register_buffer("weight", torch.tensor(class_weights, dtype=torch.float32))'
STEP = "    optimizer.zero_grad(set_to_none=True)\n    loss = loss_fn(model(images), labels)"
BUILTIN = "    return nn.CrossEntropyLoss(weight="

VALUES, GRADS, TRAFFIC, SPEED = ("ex01.smoothed_ce.values", "ex01.smoothed_ce.gradients",
                                 "ex01.smoothed_ce.no_host_traffic", "ex01.smoothed_ce.speed")
BUILTIN_VALUES, UPDATE, NO_SYNC = "ex01.builtin.values", "ex01.train_step.update", "ex01.train_step.no_sync"

CHEATS: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "replays a cached output": (
        {RETURN: "        if getattr(self, '_replay', None) is not None:\n"
                 "            return self._replay.detach().requires_grad_()\n"
                 "        self._replay = ((1 - eps) * nll + eps / num_classes * smooth) / target_weight.sum()\n"
                 "        return self._replay"},
        {VALUES: "pass", SPEED: "during timing"},
    ),
    "returns a constant": (
        {RETURN: "        return torch.tensor(4.6, requires_grad=True)"},
        {VALUES: "expected", SPEED: "during timing"},
    ),
    "returns a lazy tensor subclass": (
        {RETURN: "        class Lazy(torch.Tensor):\n            pass\n"
                 "        return (((1 - eps) * nll + eps / num_classes * smooth) / target_weight.sum()).as_subclass(Lazy)"},
        {VALUES: "tensor subclass", SPEED: "tensor subclass"},
    ),
    "patches the timer": (
        {INIT: INIT + "\n        import coursekit.timing\n        coursekit.timing._clock = lambda: 0.0"},
        {VALUES: "tampering detected", SPEED: "tampering detected"},
    ),
    "patches torch.allclose to pass a wrong loss": (
        {INIT: INIT + "\n        torch.allclose = lambda *args, **kwargs: True",
         RETURN: "        return logits.sum() * 0 + 1.0"},
        {VALUES: "tampering detected", GRADS: "tampering detected"},
    ),
    "reads the grader's reference": (
        {RETURN: "        from grader.reference.ex01 import smoothed_ce as reference\n"
                 "        value, _ = reference(logits, target, self.weight.tolist(), eps, self.ignore_index)\n"
                 "        return value.to(logits.dtype) + 0 * logits.sum()"},
        {VALUES: "pass", SPEED: "flagged for review"},
    ),
    "sleeps forever": (
        {BUILTIN: "    import time\n    time.sleep(3600)\n" + BUILTIN},
        {VALUES: "pass", BUILTIN_VALUES: "took longer than"},
    ),
    "hogs memory": (
        {BUILTIN: "    hog = [torch.ones(64 * 1024**2) for _ in range(64)]\n" + BUILTIN},
        {VALUES: "pass", BUILTIN_VALUES: "GiB of memory", UPDATE: "pass"},
    ),
    "forks a swarm of processes, then hangs": (
        {STEP: "    import subprocess, time\n"
               "    swarm = [subprocess.Popen(['sleep', '317']) for _ in range(20)]\n"
               "    time.sleep(3600)\n" + STEP},
        {UPDATE: "took longer than", VALUES: "pass"},
    ),
    "calls sys.exit inside a check": (
        {STEP: "    import sys\n    sys.exit(0)\n" + STEP},
        {UPDATE: "exited with code 0", NO_SYNC: "exited with code 0", VALUES: "pass"},
    ),
}
