"""Shared code for the *torch.compile in practice* course.

Lessons, exercises and the grader all import from here, so nothing the grader
trusts is defined inside a learner's notebook: the device profile, the toy
models, the fake data, timing, host/device-traffic detection and plots.
"""

from coursekit.profile import Profile, get_profile

__all__ = ["Profile", "get_profile"]
