"""Lesson 1's graphs for a warm compile cache (``python -m tools.warm_cache``): each item compiles and runs one."""

from __future__ import annotations

from coursekit.lessons.cross_entropy.bench import first_calls
from coursekit.lessons.cross_entropy.material import build
from coursekit.profile import Profile


def rung8(profile: Profile) -> None:
    first_calls(profile, build("8 compiled rung 3", profile.device), calls=1)


def rung7(profile: Profile) -> None:
    first_calls(profile, build("7 compiled built-in", profile.device), calls=2)


# item -> (what it compiles, how); items named here are also timed cold vs warm (``measured``)
ITEMS = {
    "lesson01-rung8": ("lesson 1: compiled hand-written cross-entropy (rung 8), loss forward+backward", rung8),
    "lesson01-rung7": ("lesson 1: compiled built-in cross-entropy (rung 7)", rung7),
}
MEASURED = ("lesson01-rung8",)
