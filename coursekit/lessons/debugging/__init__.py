"""Lesson 5: Debugging a failing compile (manifest: lesson.toml)."""
