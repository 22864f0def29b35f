"""The process-wide settings every probe runs under, kept in one place: torch's float32 precision switches
(:mod:`grader.numerics`) and Dynamo's stance (:mod:`grader.stance`).

The grading worker records them once, before it loads a notebook (:meth:`Pinned.now`), sets them back before every
probe (:meth:`Pinned.restore`), and fails a probe after which they moved (:meth:`Pinned.moved`). In-notebook checks
(``grader.local_learner``) record the kernel's own settings before a probe and do the same after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grader import numerics, stance


@dataclass(frozen=True)
class Pinned:
    """The precision switches and the stance at one moment."""

    numerics: dict[str, Any]
    stance: Any

    @classmethod
    def now(cls) -> Pinned:
        """The settings in force now, read without changing any."""
        return cls(numerics.settings(), stance.current())

    def restore(self) -> None:
        """Set both back, and forget the unsafe-stance calls noted so far."""
        numerics.restore(self.numerics)
        stance.restore(self.stance)

    def moved(self) -> str | None:
        """The teaching message for what moved since (precision first, then stance), or None when nothing did."""
        if found := numerics.changes(self.numerics):
            return numerics.message(found)
        if found := stance.changes(self.stance):
            return stance.message(found)
        return None

    def loaded(self) -> str | None:
        """The load note for precision switches that loading a notebook moved (set back before every probe)."""
        found = numerics.changes(self.numerics)
        return numerics.at_load(found) if found else None
