"""What every check receives besides the submission: profile, seeds, thresholds.

Speed thresholds come from one of two places, per check:

* a **calibration file** for this exact device, profile and torch version, written by
  ``make calibrate`` (``grader/calibration/<device>-<profile>-torch<version>.toml``), or
* the **device-class defaults** in ``grader/thresholds.toml`` (``cpu`` or ``cuda``).

``GRADER_CALIBRATION`` chooses: unset looks in ``grader/calibration/``; a folder looks
there instead; a file uses that file (if it was calibrated for this device); ``off``
uses the defaults only.  Every report says which thresholds it used
(``Context.describe_thresholds``).

Hidden inputs come from ``Context.seed(purpose, index)``: a keyed hash (HMAC-SHA256) of a long secret, so a seed
that reaches learner code (a probe's seed, or one recovered from the tensors it was sent) tells nothing about the
secret or any other purpose's seed.  ``GRADER_SECRET_SEED`` sets the secret (any string; a class graded in
several runs needs the same one); unset, each run draws 128 random bits.
"""

from __future__ import annotations

import hmac
import os
import secrets
import tomllib
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from coursekit.profile import Profile, cpu_model, device_name, get_profile
from coursekit.results import slug

THRESHOLDS_FILE = Path(__file__).with_name("thresholds.toml")
CALIBRATION_DIR = Path(__file__).with_name("calibration")
SEED_ENV = "GRADER_SECRET_SEED"
MIN_SECRET_CHARS = 16  # a set secret shorter than this gets a warning
CALIBRATION_ENV = "GRADER_CALIBRATION"


def load_thresholds(path: Path = THRESHOLDS_FILE) -> dict[str, dict[str, dict]]:
    """``{device_class: {check_id: {required, reference, measured_on}}, "review": {...}}``: ``path`` merged with
    every exercise's own ``grader/exercises/exNN/thresholds.toml`` (empty where none exist, as in the learner
    kit, which has no speed checks)."""
    merged: dict[str, dict[str, dict]] = {}
    for file in [path, *sorted(path.parent.glob("exercises/ex[0-9][0-9]/thresholds.toml"))]:
        if file.is_file():
            with file.open("rb") as fh:
                for section, entries in tomllib.load(fh).items():
                    merged.setdefault(section, {}).update(entries)
    return merged


def device_model(profile: Profile) -> str:
    """The GPU's name on CUDA (``NVIDIA H100 80GB HBM3``), ``cpu <processor model>`` on CPU."""
    if profile.device_class == "cuda":
        return device_name(profile.device)
    return f"cpu {cpu_model()}"


def calibration_name(profile: Profile) -> str:
    """``<device-model>-<profile>-torch<version>.toml``, e.g. ``cpu-amd-epyc-smoke-torch2.14.1-cu130.toml``."""
    return f"{slug(device_model(profile))}-{profile.name}-torch{slug(torch.__version__)}.toml"


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path(__file__).resolve().parents[1]))
    except ValueError:
        return str(path)


def find_calibration(profile: Profile) -> tuple[Path | None, str]:
    """The calibration file for this device, profile and torch version, or ``None`` and why not."""
    setting = os.environ.get(CALIBRATION_ENV, "").strip()
    if setting.lower() in ("off", "none", "0", "false"):
        return None, f"calibration off ({CALIBRATION_ENV}={setting})"
    wanted = calibration_name(profile)
    chosen = Path(setting) if setting else CALIBRATION_DIR
    path = chosen if chosen.suffix == ".toml" else chosen / wanted
    if not path.is_file():
        return None, f"no calibration file {_shown(path)}"
    if path.name != wanted:  # a file named explicitly: use it only if it was measured here
        with path.open("rb") as fh:
            meta = tomllib.load(fh).get("calibration", {})
        here = {"device": slug(device_model(profile)), "profile": profile.name, "torch": torch.__version__}
        there = {k: meta.get(k) for k in here}
        if there != here:
            return None, f"ignored {_shown(path)}: calibrated for {there}, this is {here}"
    return path, ""


@dataclass
class Context:
    """The grading environment shared by all checks of one run."""

    profile: Profile
    secret: str = field(repr=False)  # never sent to a worker: checks use ``seed``
    thresholds: dict[str, dict[str, dict]] = field(default_factory=load_thresholds)
    calibration: Path | None = None  # the calibration file in use, if any
    calibrated: frozenset[str] = frozenset()  # check ids whose threshold comes from it
    calibration_note: str = ""  # why no calibration file is used

    @property
    def device(self) -> str:
        return self.profile.device

    def seed(self, purpose: str, index: int = 0) -> int:
        """A 31-bit seed for one use of hidden inputs (``"ex01.hidden cases"``, index 2), the same for the same
        secret: a keyed hash, so knowing some seeds (learner code sees the inputs they make) gives no other."""
        digest = hmac.digest(self.secret.encode(), f"{purpose}/{index}".encode(), "sha256")
        return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF

    def required_speedup(self, check_id: str) -> float:
        """The threshold for ``check_id`` on this device (calibrated) or device class (default)."""
        try:
            return float(self.thresholds[self.profile.device_class][check_id]["required"])
        except KeyError:
            raise KeyError(
                f"no {self.profile.device_class} threshold for {check_id} in its exercise's thresholds.toml"
            ) from None

    def review_above(self, check_id: str) -> float | None:
        """A speedup above this is implausible for the device class and goes to an instructor."""
        review = self.thresholds.get("review", {})
        entry = self.thresholds.get(self.profile.device_class, {}).get(check_id, {})
        if "review_above" in entry:  # a check whose ratio legitimately varies a lot sets its own limit
            return float(entry["review_above"])
        reference = float(entry.get("reference", 0.0))
        if reference > 0:
            return reference * float(review.get("max_over_reference", 3.0))
        return float(review.get("max_speedup_unreferenced", 200.0))

    def threshold_source(self, check_id: str) -> str:
        """Where ``check_id``'s threshold comes from: the calibration file or the device-class defaults."""
        if check_id in self.calibrated and self.calibration is not None:
            return f"calibration {_shown(self.calibration)}"
        return f"{THRESHOLDS_FILE.name} [{self.profile.device_class}]"

    def describe_thresholds(self) -> str:
        """One line for reports: which thresholds were used, and for which checks."""
        if not THRESHOLDS_FILE.is_file():  # the learner kit: no timed checks, so no thresholds
            return "none (this copy of the grader has no timed checks)"
        defaults = f"{THRESHOLDS_FILE.name} [{self.profile.device_class}]"
        if self.calibration is None:
            why = f"; {self.calibration_note}" if self.calibration_note else ""
            return f"{defaults} (device-class defaults{why})"
        rest = sorted(set(self.thresholds.get(self.profile.device_class, {})) - self.calibrated)
        text = f"calibration {_shown(self.calibration)} for {', '.join(sorted(self.calibrated))}"
        return text + (f"; {defaults} defaults for {', '.join(rest)}" if rest else "")

    def use_calibration(self, path: Path) -> None:
        """Take this device's calibrated thresholds from ``path``; other checks keep the defaults."""
        with path.open("rb") as fh:
            checks = tomllib.load(fh).get("checks", {})
        merged = dict(self.thresholds)
        device_class = self.profile.device_class
        merged[device_class] = {**merged.get(device_class, {})}
        for cid, entry in checks.items():
            if float(entry.get("required", 0)) > 0:
                merged[device_class][cid] = {**merged[device_class].get(cid, {}), **entry}
        self.thresholds = merged
        self.calibration = path
        self.calibrated = frozenset(cid for cid in checks if cid in merged[device_class])

    @classmethod
    def create(cls, profile: Profile | None = None, secret: str | int | None = None) -> Context:
        """A context for this machine: the secret comes from ``secret``, the environment or 128 random bits, and
        the thresholds from this device's calibration file where there is one (see the module docstring)."""
        if secret is None:
            secret = os.environ.get(SEED_ENV) or secrets.token_hex(16)
            if len(secret) < MIN_SECRET_CHARS:
                warnings.warn(
                    f"{SEED_ENV} has {len(secret)} characters: a learner who works out one hidden seed could search "
                    f"for a secret this short; use {MIN_SECRET_CHARS} or more, for example "
                    "`python -c 'import secrets; print(secrets.token_hex(16))'`",
                    stacklevel=2,
                )
        ctx = cls(profile=profile or get_profile(), secret=str(secret))
        path, note = find_calibration(ctx.profile)
        if path is not None:
            ctx.use_calibration(path)
        ctx.calibration_note = note
        return ctx
