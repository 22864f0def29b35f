"""Lesson 0: Orientation: what torch.compile does (manifest: lesson.toml)."""
