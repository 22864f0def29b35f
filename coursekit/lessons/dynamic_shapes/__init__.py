"""Lesson 4: Dynamic-shape pitfalls (manifest: lesson.toml)."""
