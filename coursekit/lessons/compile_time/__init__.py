"""Lesson 6: Compile time and caching (manifest: lesson.toml)."""
