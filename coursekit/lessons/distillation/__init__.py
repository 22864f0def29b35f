"""Lesson 3: Compiling an expensive distillation loss (manifest: lesson.toml)."""
