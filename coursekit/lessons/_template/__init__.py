"""Lesson NN: a new lesson (manifest: lesson.toml). Copy this folder to start one; see ../README.md."""
