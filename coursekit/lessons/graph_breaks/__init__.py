"""Lesson 2: Fixing graph breaks (manifest: lesson.toml)."""
