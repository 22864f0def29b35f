"""What every check receives besides the submission: profile, seeds, thresholds."""

from __future__ import annotations

import os
import secrets
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from coursekit.profile import Profile, get_profile

THRESHOLDS_FILE = Path(__file__).with_name("thresholds.toml")
SEED_ENV = "GRADER_SECRET_SEED"


def load_thresholds(path: Path = THRESHOLDS_FILE) -> dict[str, dict[str, dict]]:
    """``{device_class: {check_id: {required, reference, measured_on}}}``."""
    with path.open("rb") as fh:
        return tomllib.load(fh)


@dataclass
class Context:
    """The grading environment shared by all checks of one run."""

    profile: Profile
    secret_seed: int
    thresholds: dict[str, dict[str, dict]] = field(default_factory=load_thresholds)

    @property
    def device(self) -> str:
        return self.profile.device

    def required_speedup(self, check_id: str) -> float:
        """The threshold for ``check_id`` on this device class."""
        try:
            return float(self.thresholds[self.profile.device_class][check_id]["required"])
        except KeyError:
            raise KeyError(f"no {self.profile.device_class} threshold for {check_id} in {THRESHOLDS_FILE}") from None

    def review_above(self, check_id: str) -> float | None:
        """A speedup above this is implausible for the device class and goes to an instructor."""
        review = self.thresholds.get("review", {})
        entry = self.thresholds.get(self.profile.device_class, {}).get(check_id, {})
        reference = float(entry.get("reference", 0.0))
        if reference > 0:
            return reference * float(review.get("max_over_reference", 3.0))
        return float(review.get("max_speedup_unreferenced", 200.0))

    @classmethod
    def create(cls, profile: Profile | None = None, secret_seed: int | None = None) -> Context:
        """A context for this machine; the secret seed comes from the environment or is random."""
        if secret_seed is None:
            env = os.environ.get(SEED_ENV)
            secret_seed = int(env) if env else secrets.randbits(31)
        return cls(profile=profile or get_profile(), secret_seed=secret_seed)
