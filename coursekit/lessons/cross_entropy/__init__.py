"""Lesson 1: The cross-entropy optimisation ladder (manifest: lesson.toml)."""
